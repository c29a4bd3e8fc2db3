#!/usr/bin/env bash
# `mtlab report` speed on one core: each trace reported by each build in
# alternation (so that the host's drift falls on all of them alike), RUNS times;
# prints the fastest and median wall time, events per second and peak RSS.
#
#   bench/report_speed.sh [-r RUNS] [-b BUILD]... TRACE...
#
# -b may be given several times to compare builds (e.g. -b old/mtlab -b
# target/release/mtlab); by default the build of this tree. Traces: record
# them with the commands in docs/benchmarks.md (*`mtlab report` speed*).
set -euo pipefail

RUNS=7
BUILDS=()
while getopts "r:b:h" opt; do
    case $opt in
        r) RUNS=$OPTARG ;;
        b) BUILDS+=("$OPTARG") ;;
        h) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "report_speed.sh: -h for usage" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "report_speed.sh: no trace given (-h for usage)" >&2; exit 2; }
[ ${#BUILDS[@]} -gt 0 ] || BUILDS=("$(dirname "$0")/../target/release/mtlab")
for b in "${BUILDS[@]}"; do
    [ -x "$b" ] || { echo "report_speed.sh: $b is not an executable mtlab (cargo build --release)" >&2; exit 1; }
done
for t in "$@"; do
    [ -r "$t" ] || { echo "report_speed.sh: cannot read $t" >&2; exit 1; }
done
# The last CPU this process may run on; nice -n -19 needs root and is skipped otherwise.
CPU=$(taskset -pc $$ | sed 's/.*: //; s/.*[,-]//')
NICE=()
[ "$(id -u)" = 0 ] && NICE=(nice -n -19)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

printf '%-28s %-36s %9s %9s %12s %10s\n' trace build "fastest s" "median s" "M events/s" "peak RSS"
for t in "$@"; do
    events=$("${BUILDS[0]}" report --json "$t" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin).get("events", 0))' 2>/dev/null || echo 0)
    for i in "${!BUILDS[@]}"; do : > "$TMP/$i"; done
    for _ in $(seq "$RUNS"); do
        for i in "${!BUILDS[@]}"; do
            taskset -c "$CPU" "${NICE[@]}" /usr/bin/time -a -o "$TMP/$i" -f '%e %M' "${BUILDS[$i]}" report "$t" >/dev/null 2>&1
        done
    done
    for i in "${!BUILDS[@]}"; do
        sort -n "$TMP/$i" | awk -v t="$(basename "$t")" -v b="${BUILDS[$i]}" -v ev="$events" '
            { w[NR] = $1; if ($2 > m) m = $2 }
            END { printf "%-28s %-36s %9.2f %9.2f %12.1f %7.0f MiB\n", t, b, w[1], w[int((NR + 1) / 2)], ev / w[1] / 1e6, m / 1024 }'
    done
done
