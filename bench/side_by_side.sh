#!/usr/bin/env bash
# mtlab and heaptrack side by side on issue 38's four programs, in one run:
# each program recorded by both tools as their users run them (`mtlab record`;
# `heaptrack -o F`, its default compressed trace), then each trace reported
# RUNS times, the two reports alternating (`mtlab report F`, `heaptrack_print
# F.zst`). Prints trace bytes, bytes per event (events: the heap calls mtlab
# decoded, the same calls for both), the median report wall time with its
# range, and the largest peak RSS of the reports.
#
#   bench/side_by_side.sh [-r RUNS] [-b MTLAB] [-p NAME]...
#
# -b: the mtlab build (default this tree's target/release/mtlab); -p: only
# the named programs (cc1, cc1_zstd, py_churn, threads8, py_live), default all.
# heaptrack's row is left out, with a message, where heaptrack fails or its
# trace holds fewer allocation calls than mtlab's (bench_lib.sh,
# heaptrack_whole): on cc1 (duktape.c) heaptrack 1.4 does so here, hence
# cc1_zstd, the compiler on an input heaptrack traces whole.
set -euo pipefail

RUNS=3
HERE=$(cd "$(dirname "$0")" && pwd)
MTLAB=$HERE/../target/release/mtlab
ONLY=()
while getopts "r:b:p:h" opt; do
    case $opt in
        r) RUNS=$OPTARG ;;
        b) MTLAB=$OPTARG ;;
        p) ONLY+=("$OPTARG") ;;
        h) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "side_by_side.sh: -h for usage" >&2; exit 2 ;;
    esac
done
ME=side_by_side.sh
# shellcheck source=bench/bench_lib.sh
source "$HERE/bench_lib.sh"
need_mtlab
need_tools "heaptrack gcc python3" heaptrack heaptrack_print python3 cc
make_tmp

# The interpreter itself, not a launcher script (pyenv's shims are bash:
# both tools would trace bash first).
PY=$(python3 -c 'import sys; print(sys.executable)')
eval "$("$HERE/cc1_input.sh")"
cc -O2 -fno-omit-frame-pointer -pthread -o "$TMP/report_shapes" "$HERE/report_shapes.c"

# name|environment|command (issue 38's four programs)
PROGRAMS=(
    "cc1|-|$CC1 $CC1_FLAGS $CC1_INPUT -o /dev/null"
    "cc1_zstd|-|$CC1 $CC1_FLAGS ${CC1_INPUT_HT:-missing-zstd_lazy.i} -o /dev/null"
    "py_churn|PYTHONMALLOC=malloc|$PY $HERE/py_dict_churn.py"
    "threads8|-|$TMP/report_shapes threads 2500000 8"
    "py_live|PYTHONMALLOC=malloc|$PY $HERE/py_live_peak.py"
)

median_range() { # seconds, one a line → "median (min–max)"
    sort -n | awk '{ v[NR] = $1 } END { printf "%.2f (%.2f–%.2f)", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
max_mib() { sort -n | tail -1 | awk '{ printf "%.0f", $1 / 1024 }'; }

printf '%-9s %-9s %10s %12s %8s %24s %12s\n' program tool events "trace bytes" "B/event" "report s, median (range)" "report RSS"
for p in "${PROGRAMS[@]}"; do
    IFS='|' read -r name envs cmd <<<"$p"
    wanted "$name" || continue
    env_args=()
    [ "$envs" != "-" ] && env_args=("$envs")
    # shellcheck disable=SC2086 # the command is split into its words on purpose
    env "${env_args[@]}" "$MTLAB" record -o "$TMP/$name.mtl" -- $cmd >/dev/null 2>"$TMP/$name.record.err" \
        || { echo "side_by_side.sh: mtlab record of $name failed:" >&2; cat "$TMP/$name.record.err" >&2; exit 1; }
    # shellcheck disable=SC2086
    # heaptrack can fail where mtlab does not (its heaptrack_interpret throws
    # std::bad_alloc at ~19 GB on cc1 here; its address space is capped so that
    # it fails sooner): said, and the row left out.
    if ! (ulimit -v "${HT_MEM_KIB:-12582912}"; env "${env_args[@]}" heaptrack -o "$TMP/$name.ht" $cmd) >"$TMP/heaptrack-$name.log" 2>&1; then
        echo "side_by_side.sh: heaptrack of $name failed:" >&2
        tail -5 "$TMP/heaptrack-$name.log" >&2
        continue
    fi
    ht=
    for f in "$TMP/$name.ht.zst" "$TMP/$name.ht.gz"; do [ -f "$f" ] && ht=$f; done
    [ -n "$ht" ] || { echo "side_by_side.sh: heaptrack wrote no trace for $name" >&2; continue; }
    whole=$(heaptrack_whole "$ht" "$TMP/$name.mtl")
    [ "$whole" = whole ] || { echo "side_by_side.sh: heaptrack's trace of $name is not whole (allocation calls, heaptrack/mtlab: ${whole#cut }): row left out" >&2; continue; }
    events=$("$MTLAB" report --json "$TMP/$name.mtl" 2>/dev/null | python3 -c 'import json,sys; print(sum(r["events"] for r in json.load(sys.stdin)["processes_index"]))')
    mtl_bytes=$(cat "$TMP/$name".mtl* | wc -c)
    ht_bytes=$(wc -c <"$ht")
    : >"$TMP/m.t"; : >"$TMP/h.t"
    for _ in $(seq "$RUNS"); do
        /usr/bin/time -a -o "$TMP/m.t" -f '%e %M' "$MTLAB" report "$TMP/$name.mtl" >/dev/null 2>&1
        /usr/bin/time -a -o "$TMP/h.t" -f '%e %M' heaptrack_print "$ht" >/dev/null 2>&1
    done
    for tool in mtlab heaptrack; do
        if [ $tool = mtlab ]; then t=$TMP/m.t; b=$mtl_bytes; else t=$TMP/h.t; b=$ht_bytes; fi
        printf '%-9s %-9s %10d %12d %8.3f %24s %8s MiB\n' "$name" $tool "$events" "$b" \
            "$(awk -v b="$b" -v e="$events" 'BEGIN { print b / e }')" \
            "$(awk '{ print $1 }' "$t" | median_range)" "$(awk '{ print $2 }' "$t" | max_mib)"
    done
done
