#!/usr/bin/env bash
# `mtlab record --pid` attached to and detached from one running process again
# and again (docs/benchmarks.md): CYCLES cycles (default 200) alternating
# sampling (default interval) and --full, each traced for DURATION seconds
# (default 0.1). Counts failed cycles (mtlab's exit status), checks that the
# process is alive after each, and prints the stop times mtlab reports (the
# longest any thread was stopped at attach and at detach): min, median, p90, max.
#
#   bench/attach_cycles.sh loop   [CYCLES]   bench/attach_loop.c, 8 threads
#   bench/attach_cycles.sh http   [CYCLES]   python3 -m http.server under a request loop
set -euo pipefail
kind=${1:-loop}
cycles=${2:-200}
duration=${DURATION:-0.1}
mtlab=$(realpath "${MTLAB:-$(dirname "$0")/../target/release/mtlab}")
src=$(realpath "$(dirname "$0")")
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"

case $kind in
loop)
  cc -O2 -pthread -o attach_loop "$src/attach_loop.c"
  ./attach_loop 8 > out.txt &
  pid=$!
  ;;
http)
  mkdir www && for i in $(seq 1 50); do head -c $((i * 997)) /dev/urandom > www/f$i; done
  (cd www && sha256sum f* > ../sums.txt)
  python3 -m http.server 18765 --bind 127.0.0.1 --directory www > /dev/null 2>&1 &
  pid=$!
  sleep 1
  # The request loop: every file fetched and checked, continuously.
  (while true; do
     for i in $(seq 1 50); do
       curl -sf "http://127.0.0.1:18765/f$i" -o got || { echo "FETCH FAILED f$i" >> client.txt; continue; }
       want=$(grep " f$i\$" sums.txt | cut -d' ' -f1)
       [ "$(sha256sum < got | cut -d' ' -f1)" = "$want" ] || echo "CHANGED f$i" >> client.txt
       echo ok >> fetched.txt
     done
   done) &
  ;;
esac
sleep 0.5

fails=0
for c in $(seq 1 "$cycles"); do
  mode=(); [ $((c % 2)) -eq 0 ] && mode=(--full)
  if ! "$mtlab" record --pid "$pid" "${mode[@]}" --duration "$duration" -o t.mtl 2> err.txt; then
    fails=$((fails + 1)); echo "cycle $c failed:"; cat err.txt
  fi
  grep -o 'stopped [0-9.]* ms at attach, [0-9.]* ms at detach' err.txt | awk '{print $2, $6}' >> stops.txt || true
  grep -q 'warning' err.txt && { echo "cycle $c:"; grep warning err.txt; }
  kill -0 "$pid" 2>/dev/null || { echo "process died at cycle $c"; exit 1; }
done

stats() { sort -n | awk '{v[NR]=$1} END {printf "min %.1f median %.1f p90 %.1f max %.1f ms (n=%d)\n", v[1], v[int((NR+1)/2)], v[int(NR*0.9+0.5)], v[NR], NR}'; }
echo "kind=$kind cycles=$cycles failed=$fails"
echo -n "stop at attach: "; awk '{print $1}' stops.txt | stats
echo -n "stop at detach: "; awk '{print $2}' stops.txt | stats
case $kind in
loop)
  kill -USR1 "$pid"; wait "$pid"; echo "exit status $? output: $(cat out.txt | tail -1)";;
http)
  echo "requests checked: $(wc -l < fetched.txt), failed or changed: $(cat client.txt 2>/dev/null | wc -l)"
  kill -0 "$pid" && echo "server alive";;
esac
