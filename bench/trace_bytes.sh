#!/usr/bin/env bash
# Trace bytes of the four programs of issue 38 §2, mtlab against heaptrack's
# default (compressed) trace of the same program (docs/benchmarks.md,
# *Trace size*). Per-stream figures: bench/trace_streams.py on the traces.
#
#   bench/trace_bytes.sh [MTLAB] [OUTDIR]     # MTLAB defaults to mtlab on PATH
#   NO_HEAPTRACK=1 bench/trace_bytes.sh ...   # mtlab only
#   ONLY="cc1 pyjson" bench/trace_bytes.sh ... # some of the programs
# python3 is the interpreter itself (PY, default /usr/bin/python3.11), not a
# wrapper such as pyenv's shim, whose children would be traced instead.
set -euo pipefail
MTLAB=${1:-mtlab}
OUT=${2:-${TMPDIR:-/tmp}/mtlab-trace-bytes}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-/usr/bin/python3.11}
mkdir -p "$OUT"
eval "$("$HERE/cc1_input.sh")"
[ -x "$OUT/report_shapes" ] || cc -O2 -fno-omit-frame-pointer -pthread -o "$OUT/report_shapes" "$HERE/report_shapes.c"
CHURN='d = {}
for i in range(2500000):
    k = str(i % 40000)
    d[k] = ("x" * (i % 90)) + k'
# name | environment | command
progs=(
  "cc1||$CC1 $CC1_FLAGS $CC1_INPUT -o /dev/null"
  "pychurn|PYTHONMALLOC=malloc|$PY -c CHURN"
  "threads8||$OUT/report_shapes threads 2500000 8"
  "pyjson|PYTHONMALLOC=malloc|$PY $HERE/py_json_shuffle.py"
)
size() { stat -c %s "$1"; }
printf '%-9s %12s %12s %12s %8s %8s\n' program mtlab compact heaptrack ratio compact/ht
for p in "${progs[@]}"; do
  IFS='|' read -r name envs cmd <<<"$p"
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
  # shellcheck disable=SC2206
  argv=($cmd)
  [ "${argv[2]:-}" = CHURN ] && argv[2]=$CHURN
  rm -f "$OUT/$name".mtl*
  env $envs "$MTLAB" record -o "$OUT/$name.mtl" -- "${argv[@]}" >/dev/null 2>"$OUT/$name.err" || true
  "$MTLAB" compact -o "$OUT/$name.compact.mtl" "$OUT/$name.mtl" >/dev/null 2>&1 || true
  ht=-
  if [ -z "${NO_HEAPTRACK:-}" ]; then
    rm -f "$OUT/$name.ht".*
    env $envs heaptrack -o "$OUT/$name.ht" "${argv[@]}" >/dev/null 2>&1 || true
    f=$(ls "$OUT/$name.ht".* 2>/dev/null | head -1)
    [ -n "$f" ] && ht=$(size "$f")
  fi
  m=$(size "$OUT/$name.mtl"); c=$(size "$OUT/$name.compact.mtl" 2>/dev/null || echo -)
  r=-; rc=-
  [ "$ht" != - ] && r=$(awk "BEGIN{printf \"%.1f\", $m/$ht}") && [ "$c" != - ] && rc=$(awk "BEGIN{printf \"%.2f\", $c/$ht}")
  printf '%-9s %12s %12s %12s %8s %8s\n' "$name" "$m" "$c" "$ht" "$r" "$rc"
done
