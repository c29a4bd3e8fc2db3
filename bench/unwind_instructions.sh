#!/usr/bin/env bash
# What whole stacks cost `mtlab record`, counted in instructions (valgrind's
# cachegrind), not timed: deterministic, so a change to the unwinder shows
# even when the shared 2-vCPU VM scatters wall times by more than it moves.
#
#   malloc-test (built with frame pointers): one thread, 512-byte blocks
#   malloc'd 20 frames deep, N and 2N pairs under each configuration; the
#   difference per extra pair is the cost of one pair, free of start-up.
#   With FILE.i: GCC's cc1 -O2 on that preprocessed C file (Debian's cc1 has no
#   frame pointers), total instructions of the compile.
# Configurations: untraced; mtlab record --unwind fp; mtlab record (default:
# --unwind dwarf). Instructions are not cycles: a walk's loads that miss the
# caches cost more than the compiler's own instructions.
#
# Usage: bench/unwind_instructions.sh [N] [FILE.i]      (default N 100000)
#        MTLAB=path/to/mtlab bench/unwind_instructions.sh
set -euo pipefail

N=${1:-100000}
INPUT=${2:-}
MTLAB=${MTLAB:-$(dirname "$0")/../target/release/mtlab}
[ -x "$MTLAB" ] || { echo "unwind_instructions.sh: $MTLAB not found (cargo build --release)" >&2; exit 1; }
if ! command -v valgrind >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q valgrind >&2
    fi
    command -v valgrind >/dev/null || { echo "unwind_instructions.sh: valgrind missing (apt-get install valgrind)" >&2; exit 1; }
fi
[ -z "$INPUT" ] || [ -f "$INPUT" ] || { echo "unwind_instructions.sh: $INPUT not found" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
WORKLOAD=$("$MTLAB" workload --path malloc-test)

# instructions CONFIG COMMAND...: the client's instructions under CONFIG.
instructions() {
    local cfg=$1 out="$TMP/cg.out"
    shift
    local vg=(valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$out")
    case $cfg in
        untraced) "${vg[@]}" "$@" >/dev/null 2>&1 ;;
        fp) "$MTLAB" record --unwind fp -o "$TMP/t.mtl" -- "${vg[@]}" "$@" >/dev/null 2>&1 ;;
        dwarf) "$MTLAB" record -o "$TMP/t.mtl" -- "${vg[@]}" "$@" >/dev/null 2>&1 ;;
    esac
    awk '/^summary:/ {print $2}' "$out"
}

echo "malloc-test, 1 thread, depth 20: instructions per malloc+free pair"
printf '%-10s %16s %16s %18s\n' configuration "Ir (N=$N)" "Ir (N=$((2 * N)))" "instructions/pair"
for cfg in untraced fp dwarf; do
    a=$(instructions "$cfg" "$WORKLOAD" --threads 1 --size 512 --depth 20 --iterations "$N")
    b=$(instructions "$cfg" "$WORKLOAD" --threads 1 --size 512 --depth 20 --iterations $((2 * N)))
    per=$(awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')
    printf '%-10s %16s %16s %18s\n' "$cfg" "$a" "$b" "$per"
done

[ -n "$INPUT" ] || exit 0
CC1=$(gcc -print-prog-name=cc1)
echo
echo "cc1 -O2 $(basename "$INPUT"): instructions of the compile"
base=
for cfg in untraced fp dwarf; do
    ir=$(instructions "$cfg" "$CC1" -quiet -fpreprocessed -O2 "$INPUT" -o /dev/null)
    base=${base:-$ir}
    printf '%-10s %16s %8s\n' "$cfg" "$ir" "$(awk -v a="$ir" -v b="$base" 'BEGIN { printf "%.3fx", a / b }')"
done
