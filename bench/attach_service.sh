#!/usr/bin/env bash
# A running service loop (bench/attach_loop.c: THREADS threads, default 8,
# allocating without pause) measured around `mtlab record --pid` attached for
# DURATION seconds (default 10) in sampling mode, ROUNDS times (default 5)
# (docs/benchmarks.md). Each round: the loop's throughput over a WINDOW
# (default 2 s) just before the attach, the attach + sampling + detach, the
# throughput over a window just after the detach. Prints per round the stop
# times mtlab reports (the longest any thread was stopped at attach and at
# detach) and the after/before throughput ratio, then the medians and the
# range: interleaved pairs, so a drift of the machine's speed cancels. Then
# the median of every step of the stops as mtlab reports them (its own steps
# while a thread is stopped, and those inside the library's entry points).
#
#   bench/attach_service.sh [ROUNDS]
set -euo pipefail
rounds=${1:-5}
duration=${DURATION:-10}
window=${WINDOW:-2}
mtlab=$(realpath "${MTLAB:-$(dirname "$0")/../target/release/mtlab}")
# shellcheck source=bench/attach_loop_start.sh
source "$(dirname "$0")/attach_loop_start.sh"

# Blocks allocated per second over one window (two "ops N T" lines).
rate() {
  local before
  before=$(grep -c '^ops' out.txt || true)
  kill -USR2 "$pid"; sleep "$window"; kill -USR2 "$pid"
  while [ "$(grep -c '^ops' out.txt || true)" -lt $((before + 2)) ]; do sleep 0.01; done
  grep '^ops' out.txt | tail -2 | awk 'NR==1 {o=$2; t=$3} NR==2 {printf "%.0f\n", ($2 - o) / (($3 - t) / 1e9)}'
}

echo "round before_ops_per_s after_ops_per_s after/before stop_attach_ms stop_detach_ms all_threads_ms dlopen_ms begin_ms"
for r in $(seq 1 "$rounds"); do
  b=$(rate)
  "$mtlab" record --pid "$pid" --duration "$duration" -o t.mtl 2> err.txt || { echo "round $r: mtlab failed"; cat err.txt; exit 1; }
  stops=$(grep -o 'stopped [0-9.]* ms at attach, [0-9.]* ms at detach' err.txt | awk '{print $2, $6}')
  # Where the stop at attach went: all threads stopped until one was chosen, then dlopen and the start on it.
  steps=$(grep -o 'stopped for [0-9.]* ms until one was chosen; on that one dlopen took [0-9.]* ms, starting the trace [0-9.]* ms' err.txt | awk '{print $3, $14, $19}')
  grep -E 'step by step: |inside mtlab_attach_(begin|end): ' err.txt >> steps.txt || true
  a=$(rate)
  echo "$r $b $a $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}') $stops $steps" | tee -a rounds.txt
  kill -0 "$pid" 2>/dev/null || { echo "the loop died in round $r"; exit 1; }
done

med() { sort -g | awk '{v[NR]=$1} END {printf "median %s (min %s, max %s, n=%d)", v[int((NR+1)/2)], v[1], v[NR], NR}'; }
echo "after/before throughput: $(awk '{print $4}' rounds.txt | med)"
echo "stop at attach, ms: $(awk '{print $5}' rounds.txt | med)"
echo "stop at detach, ms: $(awk '{print $6}' rounds.txt | med)"
echo "of the stop at attach: all threads stopped, ms: $(awk '{print $7}' rounds.txt | med); dlopen, ms: $(awk '{print $8}' rounds.txt | med); start, ms: $(awk '{print $9}' rounds.txt | med)"
# "mtlab: the stop at attach, step by step: NAME 1.23 ms; NAME 0.40 ms; …"
echo "every step, median over the rounds (ms):"
awk -F': ' '{
    phase = $2; sub(/^the /, "", phase); sub(/, step by step$/, "", phase)
    n = split($3, item, "; ")
    for (i = 1; i <= n; i++) {
      k = split(item[i], w, " "); name = w[1]; for (j = 2; j < k - 1; j++) name = name " " w[j]
      print phase " / " name "\t" w[k - 1]
    }
  }' steps.txt | sort -t"$(printf '\t')" -k1,1 -k2,2g | awk -F'\t' '
    $1 != key { if (key != "") out(); key = $1; n = 0 }
    { v[++n] = $2 }
    function out() { printf "  %-70s %8.2f (min %.2f, max %.2f, n=%d)\n", key, v[int((n + 1) / 2)], v[1], v[n], n }
    END { if (key != "") out() }'
kill -USR1 "$pid"; wait "$pid"; echo "exit status $? output: $(grep -v '^ops' out.txt | tail -1)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
