#!/usr/bin/env bash
# Trace bytes of issue 38 §2's programs, mtlab against heaptrack's
# default (compressed) trace of the same program (docs/benchmarks.md,
# *Trace size*), and after `mtlab compact` and `mtlab compact --lean`.
# Per-stream figures: bench/trace_streams.py on the traces.
#
#   bench/trace_bytes.sh [MTLAB] [OUTDIR]     # MTLAB defaults to mtlab on PATH
#   NO_HEAPTRACK=1 bench/trace_bytes.sh ...   # mtlab only
#   ONLY="cc1 pyjson" bench/trace_bytes.sh ... # some of the programs
# python3 is the interpreter itself (PY, default /usr/bin/python3.11), not a
# wrapper such as pyenv's shim, whose children would be traced instead.
#
# heaptrack's trace is compared only when it is whole: heaptrack exited 0 and
# heaptrack_print counts the allocation calls mtlab counted (within 0.1 %).
# Otherwise the row says `failed` or `cut N/M` and gives no ratio: heaptrack
# 1.4 cannot trace cc1 on duktape.c here (heaptrack_interpret throws
# std::bad_alloc at ~19 GB and leaves a trace of the first quarter of the
# calls), hence the second cc1 program on zstd_lazy.c (bench/cc1_input.sh).
set -euo pipefail
MTLAB=${1:-mtlab}
OUT=${2:-${TMPDIR:-/tmp}/mtlab-trace-bytes}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-/usr/bin/python3.11}
mkdir -p "$OUT"
ME=trace_bytes.sh
# shellcheck source=bench/bench_lib.sh
source "$HERE/bench_lib.sh"
eval "$("$HERE/cc1_input.sh")"
[ -x "$OUT/report_shapes" ] || cc -O2 -fno-omit-frame-pointer -pthread -o "$OUT/report_shapes" "$HERE/report_shapes.c"
CHURN='d = {}
for i in range(2500000):
    k = str(i % 40000)
    d[k] = ("x" * (i % 90)) + k'
# name | environment | command
progs=(
  "cc1||$CC1 $CC1_FLAGS $CC1_INPUT -o /dev/null"
  "cc1zstd||$CC1 $CC1_FLAGS ${CC1_INPUT_HT:-missing-zstd_lazy.i} -o /dev/null"
  "pychurn|PYTHONMALLOC=malloc|$PY -c CHURN"
  "threads8||$OUT/report_shapes threads 2500000 8"
  "pyjson|PYTHONMALLOC=malloc|$PY $HERE/py_json_shuffle.py"
  "pylive|PYTHONMALLOC=malloc|$PY $HERE/py_live_peak.py"
)
size() { stat -c %s "$1"; }
printf '%-9s %12s %12s %12s %12s %8s %8s %8s\n' program mtlab compact lean heaptrack ratio compact/ht lean/ht
for p in "${progs[@]}"; do
  IFS='|' read -r name envs cmd <<<"$p"
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
  # shellcheck disable=SC2206
  argv=($cmd)
  [ "${argv[2]:-}" = CHURN ] && argv[2]=$CHURN
  rm -f "$OUT/$name".mtl*
  env $envs "$MTLAB" record -o "$OUT/$name.mtl" -- "${argv[@]}" >/dev/null 2>"$OUT/$name.err" || true
  "$MTLAB" compact -o "$OUT/$name.compact.mtl" "$OUT/$name.mtl" >/dev/null 2>&1 || true
  "$MTLAB" compact --lean -o "$OUT/$name.lean.mtl" "$OUT/$name.mtl" >/dev/null 2>&1 || true
  ht=-
  if [ -z "${NO_HEAPTRACK:-}" ]; then
    rm -f "$OUT/$name.ht".*
    hrc=0
    # Its address space capped (HT_MEM_KIB, default 12 GiB): where heaptrack_interpret
    # runs away it fails sooner and leaves the host's memory to others.
    (ulimit -v "${HT_MEM_KIB:-12582912}"; env $envs heaptrack -o "$OUT/$name.ht" "${argv[@]}") >"$OUT/$name.ht.log" 2>&1 || hrc=$?
    f=
    for x in "$OUT/$name.ht.zst" "$OUT/$name.ht.gz"; do [ -f "$x" ] && f=$x; done
    if [ "$hrc" != 0 ] || [ -z "$f" ]; then
      ht="failed($hrc)"
    else
      whole=$(heaptrack_whole "$f" "$OUT/$name.mtl")
      if [ "$whole" = whole ]; then ht=$(size "$f"); else ht=${whole// /}; fi
    fi
  fi
  m=$(size "$OUT/$name.mtl"); c=$(size "$OUT/$name.compact.mtl" 2>/dev/null || echo -)
  l=$(size "$OUT/$name.lean.mtl" 2>/dev/null || echo -)
  r=-; rc=-; rl=-
  if [[ "$ht" =~ ^[0-9]+$ ]]; then
    r=$(awk "BEGIN{printf \"%.2f\", $m/$ht}")
    [ "$c" != - ] && rc=$(awk "BEGIN{printf \"%.2f\", $c/$ht}")
    [ "$l" != - ] && rl=$(awk "BEGIN{printf \"%.2f\", $l/$ht}")
  fi
  printf '%-9s %12s %12s %12s %12s %8s %8s %8s\n' "$name" "$m" "$c" "$l" "$ht" "$r" "$rc" "$rl"
done
