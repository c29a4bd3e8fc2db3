#!/usr/bin/env bash
# `mtlab record --live` on real programs beside heaptrack (issue 34 §4): for
# each program, the recorder's own peak memory (VmHWM of the `mtlab record`
# process, the consumer thread is in it) against heaptrack_interpret's (the
# process heaptrack analyses in), the raw trace's disk in use at most (the
# consumer's count after every batch, and st_blocks sampled every 0.2 s), the
# profile's size, and the wall time of `mtlab report PROFILE` (median of RUNS).
#
#   bench/live_programs.sh [-r RUNS] [-b MTLAB] [-p NAME]...
#
# Programs: cc1 (-O2 on duktape.c), py_work (python3 as users run it, pymalloc
# on: build, serialise, parse and sort 200 k dicts), py_churn (dict/str churn
# with PYTHONMALLOC=malloc), py_live (2.8 M blocks live at the peak, ditto).
# Peak memory is read from /proc while the tool runs (VmHWM only grows, so
# the last read before it exits is its peak, to within 10 ms of growth).
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
        h) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "live_programs.sh: -h for usage" >&2; exit 2 ;;
    esac
done
ME=live_programs.sh
# shellcheck source=bench/bench_lib.sh
source "$HERE/bench_lib.sh"
need_mtlab
need_tools "heaptrack gcc python3" heaptrack python3 gcc
make_tmp
PY=$(python3 -c 'import sys; print(sys.executable)')
eval "$("$HERE/cc1_input.sh")"

# name|environment|command
PROGRAMS=(
    "cc1|-|$CC1 $CC1_FLAGS $CC1_INPUT -o /dev/null"
    "py_work|-|$PY $HERE/py_heap_work.py"
    "py_churn|PYTHONMALLOC=malloc|$PY $HERE/py_dict_churn.py"
    "py_live|PYTHONMALLOC=malloc|$PY $HERE/py_live_peak.py"
)

# VmHWM in KiB of PID (0 once it is gone).
# Read with bash's own `read` (no process started): it runs every 10 ms.
hwm() {
    local k v _
    {
        while read -r k v _; do
            [ "$k" = VmHWM: ] && { echo "$v"; return; }
        done <"/proc/$1/status"
    } 2>/dev/null
    echo 0
}
blocks() { [ -e "$1" ] && echo $(($(stat -c %b "$1") * 512)) || echo 0; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

echo "# bench/live_programs.sh: $(date -u +%FT%TZ), $("$MTLAB" --version), $(uptime | sed 's/.*load/load/')"
printf "%-9s %12s %14s %12s %12s %10s %16s\n" program "live RSS" "interpret RSS" "raw disk max" "(sampled)" profile "report PROFILE"
for entry in "${PROGRAMS[@]}"; do
    IFS='|' read -r name envs cmd <<<"$entry"
    wanted "$name" || continue
    envv=()
    [ "$envs" = - ] || envv=("$envs")
    # shellcheck disable=SC2086
    env "${envv[@]}" "$MTLAB" record --live -o "$TMP/$name.live" -- $cmd >/dev/null 2>"$TMP/$name.live.err" &
    pid=$!
    live_rss=0 raw_max=0 tick=0
    while kill -0 "$pid" 2>/dev/null; do
        r=$(hwm "$pid"); [ "${r:-0}" -gt "$live_rss" ] && live_rss=$r
        if [ $((tick++ % 20)) = 0 ]; then
            b=$(blocks "$TMP/$name.live.raw"); [ "$b" -gt "$raw_max" ] && raw_max=$b
        fi
        sleep 0.01
    done
    wait "$pid" || { echo "$name: record --live failed:"; cat "$TMP/$name.live.err"; exit 1; }
    consumer_max=$("$MTLAB" report --json "$TMP/$name.live" | python3 -c 'import json,sys; print(json.load(sys.stdin)["live_profile"]["lag"]["max_raw_disk_bytes"])')
    prof=$(stat -c %s "$TMP/$name.live")
    walls=()
    for _ in $(seq "$RUNS"); do
        s=$(date +%s.%N)
        "$MTLAB" report "$TMP/$name.live" >/dev/null
        walls+=("$(awk -v a="$(date +%s.%N)" -v b="$s" 'BEGIN { printf "%.3f", a - b }')")
    done
    wall=$(printf '%s\n' "${walls[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "%.2f s (%.2f–%.2f)", v[int((NR + 1) / 2)], v[1], v[NR] }')

    # heaptrack as its users run it; its analysis runs in heaptrack_interpret.
    mkdir -p "$TMP/ht_$name"
    # shellcheck disable=SC2086
    (cd "$TMP/ht_$name" && env "${envv[@]}" heaptrack -o "$TMP/ht_$name/t" $cmd >/dev/null 2>&1) &
    hpid=$!
    int_rss=0 ips=""
    while kill -0 "$hpid" 2>/dev/null; do
        [ -n "$ips" ] || ips=$(pgrep -f heaptrack_interpret || true)
        for ip in $ips; do
            r=$(hwm "$ip"); [ "${r:-0}" -gt "$int_rss" ] && int_rss=$r
        done
        sleep 0.01
    done
    wait "$hpid" || echo "# $name: heaptrack exited non-zero"
    printf "%-9s %9s MiB %11s MiB %8s MiB %8s MiB %6s KiB %16s\n" "$name" "$((live_rss / 1024))" "$((int_rss / 1024))" \
        "$(mib "$consumer_max")" "$(mib "$raw_max")" "$((prof / 1024))" "$wall"
done
