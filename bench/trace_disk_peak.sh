#!/usr/bin/env bash
# Disk held by a trace while `mtlab record` runs (issue 38 §2): every 50 ms,
# the bytes of the trace files in OUTDIR plus those of the files `mtlab
# record` has open there (the unnamed rewrite beside the raw trace counts
# too); prints the peak, the final size and their ratio.
#
#   bench/trace_disk_peak.sh MTLAB OUTDIR -- PROGRAM [ARGS]
set -euo pipefail
MTLAB=$1 OUT=$2; shift 3
mkdir -p "$OUT"; rm -rf "$OUT"/peak.mtl*
"$MTLAB" record -o "$OUT/peak.mtl" -- "$@" >/dev/null 2>"$OUT/peak.err" &
rec=$!
peak=0
while kill -0 "$rec" 2>/dev/null; do
  # Each file once (by inode): the raw trace is both named and open. Blocks
  # allocated, not the length, so that holes punched in a file do not count.
  # A process tree's descendants write into peak.mtl.d/.
  n=$(for f in "$OUT"/peak.mtl* "$OUT"/peak.mtl.d/* /proc/$rec/fd/*; do
        [ -e "$f" ] || continue
        case "$f" in /proc/*) case "$(readlink "$f" 2>/dev/null)" in "$OUT"/*) ;; *) continue ;; esac ;; esac
        stat -L -c '%i %b %B' "$f" 2>/dev/null || true
      done | sort -u -k1,1 | awk '{n += $2 * $3} END {print n + 0}')
  [ "$n" -gt "$peak" ] && peak=$n
  sleep 0.05
done
wait "$rec" || true
final=$(find "$OUT" -path "$OUT/peak.mtl*" -type f -exec stat -c '%b %B' {} + | awk '{n += $1 * $2} END {print n}')
awk -v p="$peak" -v f="$final" 'BEGIN{printf "peak %d bytes on disk, final %d bytes on disk, peak/final %.2f\n", p, f, p/f}'
