# An allocation-heavy python3 run for the heap study: build, serialize and
# parse a list of dicts, then drop half of it and sort the rest.
import json
rows = [{"id": i, "name": "item-%d" % i, "tags": ["t%d" % (i % 7)] * (i % 5)} for i in range(200000)]
text = json.dumps(rows)
back = json.loads(text)
del rows
back = sorted(back[::2], key=lambda r: r["name"])
print(len(back), len(text))
