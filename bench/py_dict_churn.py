# python3 dict/str churn (issue 38's second program; run with
# PYTHONMALLOC=malloc so that every object is a malloc call): dicts of
# formatted strings built and dropped, a few kept, ~17 M heap calls.
keep = []
for round_ in range(60):
    d = {"k%d" % i: "v%d-%d" % (i, round_) for i in range(20000)}
    s = ",".join(d.values())
    keep.append(s[:100])
print(len(keep))
