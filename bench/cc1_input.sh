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
#   bench/cc1_input.sh --input-ht # prints only CC1_INPUT_HT's path (see below)
#
# CC1_INPUT_HT is a second input for comparisons with heaptrack: zstd's
# lib/compress/zstd_lazy.c (3.5 M allocation calls at -O2), preprocessed from
# the zstd-sys crate this project builds with (found in the cargo registry;
# empty when it is not there). heaptrack 1.4 cannot trace cc1 on duktape.c:
# its heaptrack_interpret throws std::bad_alloc at ~19 GB (after ~1.6 M of the
# 6.2 M allocation calls; its trace ends there and cc1 dies of SIGPIPE), and it
# does the same on some other inputs, but not on this one.
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

# The zstd source of the newest zstd-sys crate in the cargo registry.
OUT_HT=
ZSTD_LIB=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/zstd-sys-*/zstd/lib 2>/dev/null | sort -V | tail -1)
if [ -n "$ZSTD_LIB" ] && [ -f "$ZSTD_LIB/compress/zstd_lazy.c" ]; then
    OUT_HT=$OUTDIR/zstd_lazy.i
    if [ ! -s "$OUT_HT" ] || [ "$ZSTD_LIB/compress/zstd_lazy.c" -nt "$OUT_HT" ]; then
        mkdir -p "$OUTDIR"
        gcc -E -P -O2 -I"$ZSTD_LIB" -I"$ZSTD_LIB/common" "$ZSTD_LIB/compress/zstd_lazy.c" -o "$OUT_HT.tmp.$$"
        mv -f "$OUT_HT.tmp.$$" "$OUT_HT"
    fi
fi

case "${1:-}" in
    --cc1) echo "$CC1" ;;
    --input) echo "$OUT" ;;
    --input-ht) [ -n "$OUT_HT" ] || { echo "cc1_input.sh: zstd-sys's zstd_lazy.c not found in the cargo registry (cargo fetch in this repository)" >&2; exit 1; }
                echo "$OUT_HT" ;;
    --flags) echo "$FLAGS" ;;
    "") printf 'CC1=%q\nCC1_INPUT=%q\nCC1_FLAGS=%q\nCC1_INPUT_HT=%q\n' "$CC1" "$OUT" "$FLAGS" "$OUT_HT" ;;
    *) echo "usage: $0 [--cc1|--input|--input-ht|--flags]" >&2; exit 2 ;;
esac
