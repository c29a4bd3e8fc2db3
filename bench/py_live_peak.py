# python3 with ~2.8 M blocks live at the peak (issue 38's fourth program; run
# with PYTHONMALLOC=malloc): 1.4 M one-element tuples, each holding a str.
x = [(str(i) + "abc",) for i in range(1_400_000)]
print(len(x))
del x
