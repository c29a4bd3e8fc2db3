#!/bin/bash
# The flight recorder on a real program with an independent count (issue 34 §5):
# python3 under `record --live --keep-last 10s` with a counting LD_PRELOAD shim
# after mtlab's; `mtlab ctl PID dump` right after a known phase; the window's
# malloc/realloc calls and bytes beside the shim's count of the phase.
#
# usage: bench/flight_window.sh   (MTLAB=path/to/mtlab, default target/release/mtlab)
set -euo pipefail
MTLAB=$(realpath "${MTLAB:-target/release/mtlab}")
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/flight_window.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cc -O2 -shared -fPIC -o "$dir/count.so" "$here/count_shim.c" -ldl
cd "$dir"
LD_PRELOAD="$dir/count.so" "$MTLAB" record --live --keep-last 10s -o py.live -- /usr/bin/python3 "$here/flight_phase.py" "$dir/count.so" 12 \
    >out.txt 2>err.txt &
rec=$!
for _ in $(seq 600); do grep -q malloc out.txt && break; sleep 0.1; done
pid=$(pgrep -P "$rec" -f flight_phase.py | head -1)
"$MTLAB" ctl "$pid" dump >/dev/null
wait "$rec"
echo "shim, the phase: $(cat out.txt)"
"$MTLAB" report --json py.live.flight-1 | python3 -c '
import json, sys
v = json.load(sys.stdin)
f = v["functions"]
calls = {k: f[k]["calls"] for k in ("malloc", "calloc", "realloc", "free")}
size = sum(round(f[k]["mean_size"] * f[k]["calls"]) for k in ("malloc", "calloc", "realloc"))
print("window:", calls, "bytes", size, "| window", v["flight"]["start_ns"] / 1e9, "-", v["flight"]["end_ns"] / 1e9, "s, events before it", v["flight"]["events_before"])'
