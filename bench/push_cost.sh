#!/bin/sh
# The cost of `record --sample --push-every` on a running program: PAIRS
# interleaved runs (A, B, A, B, …) of
#   A: mtlab record --sample 512KiB --push-every 1s --otlp-endpoint URL [--otlp-protocol P] -- /usr/bin/python3 py_dict_churn.py
#   B: mtlab record --sample 512KiB -- /usr/bin/python3 py_dict_churn.py
# with PYTHONMALLOC=malloc (every object a malloc call, ~17 M calls, several
# seconds: several windows pushed). Each run timed whole by /usr/bin/time
# (wall; user+sys of mtlab and the program together), and the program's own
# CPU time (user+sys, its getrusage at its end: what the pushes cost the
# program itself, its buffers flushed at each window). Prints each pair's
# A/B ratios, then the median and the min-max of the pairs, and A's push
# summary lines. URL: a running OTLP receiver (an OpenTelemetry Collector's
# otlp receiver; docs/otlp.md).
#
#   bench/push_cost.sh MTLAB URL [PAIRS] [PROTOCOL]
set -eu
mtlab=$1
url=$2
pairs=${3:-5}
protocol=${4:-http/protobuf}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() { # label, extra flags…
    label=$1
    shift
    PYTHONMALLOC=malloc /usr/bin/time -f "%e %U %S" -o "$work/time" \
        "$mtlab" record -o "$work/t.mtl" --sample 512KiB "$@" -- /usr/bin/python3 -c "$self_cpu" "$here/py_dict_churn.py" >"$work/out" 2>"$work/err.$label"
    echo "$(cat "$work/time") $(sed -n 's/^self_cpu //p' "$work/out")"
    grep -h "pushed" "$work/err.$label" >>"$work/pushes" || true
}
self_cpu='import resource, runpy, sys; runpy.run_path(sys.argv[1]); r = resource.getrusage(resource.RUSAGE_SELF); print("self_cpu", r.ru_utime + r.ru_stime)'
i=0
while [ "$i" -lt "$pairs" ]; do
    a=$(run A --push-every 1s --otlp-endpoint "$url" --otlp-protocol "$protocol")
    b=$(run B)
    echo "$a $b" >>"$work/pairs"
    i=$((i + 1))
done
# Each line: A's wall user sys program-cpu, then B's.
awk '{ printf "pair %d: wall A %.2f s B %.2f s (A/B %.3f); cpu, mtlab and program, A %.2f s B %.2f s (A/B %.3f); program cpu A %.3f s B %.3f s (A/B %.3f)\n", NR, $1, $5, $1 / $5, $2 + $3, $6 + $7, ($2 + $3) / ($6 + $7), $4, $8, $4 / $8 }' "$work/pairs"
for col in wall cpu program_cpu; do
    awk -v col="$col" '{ print (col == "wall") ? $1 / $5 : (col == "cpu") ? ($2 + $3) / ($6 + $7) : $4 / $8 }' "$work/pairs" | sort -g |
        awk -v col="$col" '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s A/B: median %.3f, min-max %.3f-%.3f over %d pairs\n", col, m, v[1], v[NR], NR }'
done
sort "$work/pushes" | uniq -c
