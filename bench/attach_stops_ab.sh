#!/usr/bin/env bash
# The stops at attach and at detach of two mtlab builds, interleaved (A B A B …)
# on one running bench/attach_loop.c (THREADS threads, default 8, allocating
# without pause): ROUNDS pairs (default 10), each attach sampling for
# DURATION seconds (default 1). Prints each build's median and range of the
# stop at attach and at detach (as mtlab reports them), and the median and
# range of the ratios B/A pair by pair (docs/benchmarks.md).
#
#   MTLAB_A=path/to/old/mtlab MTLAB_B=path/to/new/mtlab bench/attach_stops_ab.sh [ROUNDS]
set -euo pipefail
rounds=${1:-10}
duration=${DURATION:-1}
a=$(realpath "${MTLAB_A:?the build to compare against}")
b=$(realpath "${MTLAB_B:-$(dirname "$0")/../target/release/mtlab}")
# shellcheck source=bench/attach_loop_start.sh
source "$(dirname "$0")/attach_loop_start.sh"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
one() {
  "$1" record --pid "$pid" --duration "$duration" -o t.mtl 2> err.txt || { cat err.txt; exit 1; }
  grep -o 'stopped [0-9.]* ms at attach, [0-9.]* ms at detach' err.txt | awk '{print $2, $6}'
}
for r in $(seq 1 "$rounds"); do
  echo "$(one "$a") $(one "$b")" >> pairs.txt
  kill -0 "$pid" 2>/dev/null || { echo "the loop died in round $r"; exit 1; }
done
med() { sort -g | awk '{v[NR]=$1} END {printf "median %.2f (min %.2f, max %.2f, n=%d)", v[int((NR+1)/2)], v[1], v[NR], NR}'; }
echo "A stop at attach, ms: $(awk '{print $1}' pairs.txt | med)"
echo "B stop at attach, ms: $(awk '{print $3}' pairs.txt | med)"
echo "B/A at attach:        $(awk '{print $3 / $1}' pairs.txt | med)"
echo "A stop at detach, ms: $(awk '{print $2}' pairs.txt | med)"
echo "B stop at detach, ms: $(awk '{print $4}' pairs.txt | med)"
echo "B/A at detach:        $(awk '{print $4 / $2}' pairs.txt | med)"
kill -USR1 "$pid"; wait "$pid"; echo "exit status $? output: $(grep -v '^ops' out.txt | tail -1)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
