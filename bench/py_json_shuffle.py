# A python3 run for `mtlab report` speed (docs/benchmarks.md): 150 000 JSON
# records built, serialized, parsed back, shuffled and sorted, so that blocks
# are freed in an order unlike the one they were allocated in (24 M events
# with PYTHONMALLOC=malloc).
import json, random
random.seed(1)
d = [{"id": i, "name": "n%d" % i, "tags": [random.random() for _ in range(5)], "m": {"a": i, "b": str(i)}} for i in range(150000)]
s = json.dumps(d)
e = json.loads(s)
random.shuffle(e)
e.sort(key=lambda x: x["tags"][0])
print(len(s), len(e))
