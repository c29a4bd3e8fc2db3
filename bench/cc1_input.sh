#!/usr/bin/env bash
# Prepare the "real program" benchmark input: GCC's compiler proper (cc1)
# compiling the Duktape JavaScript engine amalgamation (one 3.7 MB C file
# shipped by Debian's duktape-dev package) at -O2.
#
# Usage:
#   bench/cc1_input.sh            # prints CC1=... and CC1_INPUT=... (eval-able)
#   bench/cc1_input.sh --cc1      # prints only the cc1 path
#   bench/cc1_input.sh --input    # prints only the .i path
#   eval "$(bench/cc1_input.sh)"; "$CC1" $CC1_FLAGS "$CC1_INPUT" -o /dev/null
#
# The preprocessed file is created once (deterministic for a given gcc/glibc,
# i.e. Debian 12: md5 04fe7dbbbc6944676eaa3552854e4749, 1,842,993 bytes) in
# $MTLAB_BENCH_DIR (default ${TMPDIR:-/tmp}/mtlab-bench).
# On Debian 12 / 2 cores, cc1 takes ~9 s and ~250 MB peak RSS on it.
set -euo pipefail

SRC=/usr/share/duktape/duktape.c
OUTDIR=${MTLAB_BENCH_DIR:-${TMPDIR:-/tmp}/mtlab-bench}
OUT=$OUTDIR/duktape.i
FLAGS="-quiet -fpreprocessed -O2"

command -v gcc >/dev/null || { echo "cc1_input.sh: gcc not found" >&2; exit 1; }

if [ ! -f "$SRC" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q duktape-dev >&2 \
            || { apt-get update -q >&2 && apt-get install -y -q duktape-dev >&2; }
    fi
    [ -f "$SRC" ] || { echo "cc1_input.sh: $SRC missing (apt-get install duktape-dev)" >&2; exit 1; }
fi

CC1=$(gcc -print-prog-name=cc1)
[ -x "$CC1" ] || { echo "cc1_input.sh: cc1 not found ($CC1)" >&2; exit 1; }

if [ ! -s "$OUT" ] || [ "$SRC" -nt "$OUT" ]; then
    mkdir -p "$OUTDIR"
    # -P: no line markers; -O2 so glibc headers see __OPTIMIZE__ as in a real -O2 build.
    gcc -E -P -O2 "$SRC" -o "$OUT.tmp.$$"
    mv -f "$OUT.tmp.$$" "$OUT"
fi

case "${1:-}" in
    --cc1) echo "$CC1" ;;
    --input) echo "$OUT" ;;
    --flags) echo "$FLAGS" ;;
    "") printf 'CC1=%q\nCC1_INPUT=%q\nCC1_FLAGS=%q\n' "$CC1" "$OUT" "$FLAGS" ;;
    *) echo "usage: $0 [--cc1|--input|--flags]" >&2; exit 2 ;;
esac
