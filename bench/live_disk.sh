#!/bin/bash
# Disk in use by `mtlab record --live` over a long run of the service
# workload, beside `mtlab record` (full trace) and heaptrack on a shorter
# run of the same workload (docs/benchmarks.md, issue 34 §4).
#
# usage: bench/live_disk.sh [LIVE_SECONDS=600] [SHORT_SECONDS=60] [RATE=1M/s] [EVERY_SECONDS=5]
#   MTLAB=path/to/mtlab (default target/release/mtlab); KEEP=1 keeps the work directory.
#
# Disk in use is what the files take on disk (st_blocks × 512, so the raw
# trace's punched holes do not count): for --live the raw trace plus the
# profile file, sampled every EVERY_SECONDS. The 24 h projection for --live
# is the largest raw trace seen plus the profile's size extrapolated
# linearly from its growth over the second half of the run; for the others
# it is their disk per minute × 1440.
set -euo pipefail
LIVE=${1:-600}
SHORT=${2:-60}
RATE=${3:-1M/s}
EVERY=${4:-5}
MTLAB=${MTLAB:-target/release/mtlab}
W=$("$MTLAB" workload --path service)
dir=$(mktemp -d /tmp/live_disk.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$dir"' EXIT

# Allocated bytes of the files given (missing ones count 0).
allocated() {
    local sum=0 b
    for f in "$@"; do
        [ -e "$f" ] || continue
        b=$(stat -c %b "$f")
        sum=$((sum + b * 512))
    done
    echo "$sum"
}
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }

# Samples `allocated GLOB` every EVERY seconds while PID runs, as lines
# "SECONDS BYTES" into FILE; $3 and further are the files (a glob pattern in quotes).
sample() {
    local pid=$1 out=$2 pattern=$3 t0 now
    t0=$(date +%s.%N)
    while kill -0 "$pid" 2>/dev/null; do
        now=$(date +%s.%N)
        # shellcheck disable=SC2086
        echo "$(awk -v a="$now" -v b="$t0" 'BEGIN { printf "%.1f", a - b }') $(allocated $pattern)" >>"$out"
        sleep "$EVERY"
    done
}

echo "# bench/live_disk.sh: $(date -u +%FT%TZ), $(uptime | sed 's/.*load/load/')"
echo "# workload: $W --rate $RATE; live ${LIVE}s, record and heaptrack ${SHORT}s each"

# 1. record --live: raw trace and profile sampled apart.
"$MTLAB" record --live --snapshot-every 10 -o "$dir/svc.live" -- "$W" --rate "$RATE" --duration "${LIVE}s" \
    >"$dir/live.out" 2>"$dir/live.err" &
pid=$!
t0=$(date +%s.%N)
: >"$dir/live.samples"
max_rss=0
while kill -0 "$pid" 2>/dev/null; do
    now=$(date +%s.%N)
    raw=$(allocated "$dir/svc.live.raw")
    prof=$(allocated "$dir/svc.live")
    rss=$(awk '/VmRSS/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ "${rss:-0}" -gt "$max_rss" ] && max_rss=$rss
    awk -v a="$now" -v b="$t0" -v r="$raw" -v p="$prof" 'BEGIN { printf "%.1f %d %d %d\n", a - b, r, p, r + p }' >>"$dir/live.samples"
    sleep "$EVERY"
done
wait "$pid" || { echo "record --live failed:"; cat "$dir/live.err"; exit 1; }
echo "# live: the workload said: $(cat "$dir/live.out")"
lag=$("$MTLAB" report --json "$dir/svc.live" | python3 -c 'import json,sys; v=json.load(sys.stdin)["live_profile"]; print(v["snapshot"], json.dumps(v["lag"]))')
echo "# live: snapshots and lag at the end: $lag"
# The consumer's own count of the raw file's blocks, taken after every batch
# it reads: it sees peaks the samples every EVERY seconds miss.
consumer_max=$("$MTLAB" report --json "$dir/svc.live" | python3 -c 'import json,sys; print(json.load(sys.stdin)["live_profile"]["lag"]["max_raw_disk_bytes"])')
echo "# live: recorder peak RSS $((max_rss / 1024)) MiB (record's own process; the consumer thread is in it)"
echo "# live samples (seconds, raw trace allocated, profile, sum):"
awk '{ printf "#   %7.1f s  raw %8.2f MiB  profile %6.2f MiB  in use %8.2f MiB\n", $1, $2/1048576, $3/1048576, $4/1048576 }' "$dir/live.samples" \
    | awk 'NR % 12 == 1'
final_prof=$(allocated "$dir/svc.live")
awk -v final="$final_prof" -v live="$LIVE" -v cmax="$consumer_max" '
    { t[NR] = $1; raw[NR] = $2; prof[NR] = $3; use[NR] = $4; if ($4 > max) max = $4; if ($2 > maxraw) maxraw = $2 }
    END {
        n = NR; h = int(n / 2) + 1
        # the profile grows with leaked sites and time-series points: its slope over the second half
        slope = (t[n] > t[h]) ? (prof[n] - prof[h]) / (t[n] - t[h]) : 0
        if (slope < 0) slope = 0
        p24 = final + slope * (86400 - live)
        printf "live: samples %d, max disk in use %.2f MiB (raw trace at most %.2f MiB), profile at the end %.2f MiB\n", n, max / 1048576, maxraw / 1048576, final / 1048576
        if (cmax > maxraw) maxraw = cmax
        printf "live: raw trace at most %.2f MiB by the consumer'"'"'s own count (after every batch it read); with the profile %.2f MiB\n", cmax / 1048576, (cmax + final) / 1048576
        printf "live: profile growth %.1f KiB/min over the second half; projected 24 h disk %.1f MiB (the most raw trace seen + the profile then)\n", slope * 60 / 1024, (maxraw + p24) / 1048576
    }' "$dir/live.samples"

# Runs TOOL... on the workload for SHORT seconds with its files in $dir/NAME,
# samples their disk in use, prints NAME's max disk in use and per minute.
short_run() {
    local name=$1 pid end
    shift
    mkdir "$dir/$name"
    "$@" "$W" --rate "$RATE" --duration "${SHORT}s" >"$dir/$name.out" 2>"$dir/$name.err" &
    pid=$!
    : >"$dir/$name.samples"
    sample "$pid" "$dir/$name.samples" "$dir/$name/*"
    wait "$pid" || { echo "$name failed:"; cat "$dir/$name.err"; exit 1; }
    echo "# $name: the workload said: $(grep '"workload"' "$dir/$name.out" || true)"
    end=$(allocated "$dir/$name"/*)
    awk -v end="$end" -v short="$SHORT" -v name="$name" '
        { if ($2 > max) max = $2 }
        END {
            if (end > max) max = end
            printf "%s: max disk in use %.1f MiB over %d s (%.1f MiB at the end): %.1f MiB/min; 24 h at that rate %.1f GiB\n", name, max / 1048576, short, end / 1048576, max / 1048576 * 60 / short, max / 1073741824 * 86400 / short
        }' "$dir/$name.samples"
}

# 2. record (full trace), kept until exit and finished.
short_run record "$MTLAB" record -o "$dir/record/svc.mtl" --

# 3. heaptrack (compressed trace written while it runs).
if command -v heaptrack >/dev/null; then
    short_run heaptrack heaptrack -o "$dir/heaptrack/svc"
else
    echo "heaptrack: SKIPPED (not installed: apt-get install heaptrack)"
fi
[ "${KEEP:-0}" = 1 ] && echo "# kept: $dir"
exit 0
