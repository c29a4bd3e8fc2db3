#!/usr/bin/env bash
# Whether two mtlab builds report the same: each trace's `report --json`
# from OLD and from NEW compared byte for byte. The traces: the programs of
# native/tests that run without arguments (recorded here with OLD; those
# that fail or take over 20 s are left out) and any TRACE given.
#
#   bench/report_same.sh -a OLD -b NEW [-k DIR] [TRACE...]
#
# -k: keep the recordings in DIR (made again when it is empty). Prints one
# line a differing trace and the count; exit status 1 when any differs.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
OLD= NEW= KEEP=
while getopts "a:b:k:h" opt; do
    case $opt in
        a) OLD=$OPTARG ;;
        b) NEW=$OPTARG ;;
        k) KEEP=$OPTARG ;;
        h) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "report_same.sh: -h for usage" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
for b in "$OLD" "$NEW"; do
    [ -n "$b" ] && [ -x "$b" ] || { echo "report_same.sh: -a OLD and -b NEW must be mtlab builds (-h for usage)" >&2; exit 2; }
done
if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP"
    DIR=$KEEP
else
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/report_same.XXXXXX")
    trap 'rm -rf "$DIR"' EXIT
fi

traces=("$@")
if [ -z "$(ls -A "$DIR" 2>/dev/null | grep '\.mtl$' || true)" ]; then
    for src in "$HERE"/../native/tests/*.c; do
        name=$(basename "$src" .c)
        cc -O0 -g -fno-omit-frame-pointer -pthread -o "$DIR/$name" "$src" 2>/dev/null || continue
        # Only the programs that run to a zero exit without arguments.
        if ! timeout 20 "$OLD" record -o "$DIR/$name.mtl" -- "$DIR/$name" >/dev/null 2>&1 </dev/null; then
            rm -rf "$DIR/$name.mtl" "$DIR/$name.mtl.d"
        fi
    done
fi
for t in "$DIR"/*.mtl; do traces+=("$t"); done

differ=0
for t in "${traces[@]}"; do
    a=$("$OLD" report --json "$t" 2>&1 | sha256sum)
    b=$("$NEW" report --json "$t" 2>&1 | sha256sum)
    if [ "$a" != "$b" ]; then
        echo "differs: $t"
        differ=$((differ + 1))
    fi
done
echo "${#traces[@]} traces, $differ differing"
[ "$differ" = 0 ]
