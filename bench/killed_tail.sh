#!/usr/bin/env bash
# What an OOM kill leaves in the trace: python3 allocates 1 MiB (a bytearray,
# zeroed, so charged) every 20 ms inside a memory cgroup limited to LIMIT_MB,
# and after each writes its own count of them to a file; the kernel's OOM
# killer ends it (SIGKILL) at the limit. For `mtlab record` and `mtlab record
# --keep-last 10s` it prints python's count against the 1 MiB blocks the
# trace holds (and the flight window written on the kill). What a killed
# process's threads still buffered dies with it; the difference is that.
#
# Needs root (it makes a cgroup: v2 with the memory controller, else the v1
# memory hierarchy).
# Usage: bench/killed_tail.sh [LIMIT_MB]       (default 200)
#        MTLAB=path/to/mtlab PYTHON=python3.11 bench/killed_tail.sh
set -euo pipefail

LIMIT_MB=${1:-200}
MTLAB=${MTLAB:-$(dirname "$0")/../target/release/mtlab}
PYTHON=${PYTHON:-python3}
[ -x "$MTLAB" ] || { echo "killed_tail.sh: $MTLAB not found (cargo build --release)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "killed_tail.sh: making a cgroup needs root" >&2; exit 1; }
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    ROOT=/sys/fs/cgroup LIMIT_FILE=memory.max
elif [ -d /sys/fs/cgroup/memory ]; then
    ROOT=/sys/fs/cgroup/memory LIMIT_FILE=memory.limit_in_bytes
else
    echo "killed_tail.sh: no cgroup memory controller mounted" >&2
    exit 1
fi
TMP=$(mktemp -d)
GROUP=$ROOT/mtlab-killed-tail-$$
mkdir "$GROUP"
trap 'rmdir "$GROUP" 2>/dev/null; rm -rf "$TMP"' EXIT
echo $((LIMIT_MB << 20)) > "$GROUP/$LIMIT_FILE"

cat > "$TMP/grow.py" <<'PY'
import os, sys, time
open(sys.argv[1] + "/cgroup.procs", "w").write(str(os.getpid()))
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
keep, n = [], 0
while True:
    keep.append(bytearray(1 << 20))
    n += 1
    os.pwrite(fd, b"%8d" % n, 0)
    time.sleep(0.02)
PY

# blocks TRACE: the calls of 1 MiB or more in the trace's allocation sites.
blocks() {
    "$MTLAB" report --json --top 1000 "$1" 2>/dev/null | "$PYTHON" -c '
import json, sys
r = json.load(sys.stdin)
print(sum(s["calls"] for s in r["top_sites"]["by_bytes"] if s["calls"] and s["bytes"] // s["calls"] >= 1 << 20))'
}

printf '%-22s %14s %14s %14s\n' configuration "python's count" "in the trace" "in the window"
for cfg in record keep-last; do
    args=()
    [ $cfg = keep-last ] && args=(--keep-last 10s)
    rm -f "$TMP"/t.mtl*
    # record ends as the program did, killed by SIGKILL: waited for as a
    # background job, of which bash says nothing.
    "$MTLAB" record "${args[@]}" -o "$TMP/t.mtl" -- "$PYTHON" "$TMP/grow.py" "$GROUP" "$TMP/count" >/dev/null 2>&1 &
    { wait $!; } 2>/dev/null || true
    window=-
    last=$(ls "$TMP"/t.mtl.flight-* 2>/dev/null | sort -t- -k2 -n | tail -1 || true)
    [ -n "$last" ] && window=$(blocks "$last")
    printf '%-22s %14s %14s %14s\n' "$cfg" "$(tr -d ' ' < "$TMP/count")" "$(blocks "$TMP/t.mtl")" "$window"
done
