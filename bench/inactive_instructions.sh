#!/usr/bin/env bash
# What mtlab's sampler costs per malloc/free pair, loaded but inactive and
# active, counted in instructions (valgrind's cachegrind), not timed: on a
# shared 2-vCPU VM the timed study (`mtlab bench malloc`) scatters by tens of
# percent between repetitions, far more than the 1 % the inactive target allows.
#
# Runs mtlab's malloc-test workload (2 threads, 512-byte blocks, depth 10)
# with N and 2N iterations under each configuration; the difference divided
# by the N extra pairs per thread is the cost of one pair, free of start-up.
#   none            no preload
#   inactive        LD_PRELOAD mtlab, --sample 512KiB --inactive (GOT routing on)
#   inactive-noGOT  the same with MTLAB_GOT=0: calls pass through mtlab's shims
#   active-512KiB   sampling on, mean interval 512 KiB, frame-pointer stacks
#   active-64KiB    the same at 64 KiB
# Instructions are not cycles: a stack capture's loads and the interposition
# hop's indirect jump cost more per instruction than the allocator's own code.
#
# Usage: bench/inactive_instructions.sh [N]      (default 100000)
#        MTLAB=path/to/mtlab bench/inactive_instructions.sh
set -euo pipefail

N=${1:-100000}
MTLAB=${MTLAB:-$(dirname "$0")/../target/release/mtlab}
[ -x "$MTLAB" ] || { echo "inactive_instructions.sh: $MTLAB not found (cargo build --release)" >&2; exit 1; }
if ! command -v valgrind >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q valgrind >&2
    fi
    command -v valgrind >/dev/null || { echo "inactive_instructions.sh: valgrind missing (apt-get install valgrind)" >&2; exit 1; }
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# mtlab unpacks its native parts on first use: the preload library's path
# from a traced child's environment, the workload's from a tiny tracer run.
SO=$("$MTLAB" record --sample 512KiB --inactive -o "$TMP/probe.mtl" -- sh -c 'echo "$LD_PRELOAD"' 2>/dev/null |
    tr ':' '\n' | grep libmtlab_preload | head -1)
WORKLOAD=$("$MTLAB" bench tracer --iterations 1000 --reps 1 --no-heaptrack --dir "$TMP/probe" 2>/dev/null |
    sed -n 's/^tracer overhead on malloc-test: \([^ ]*\) .*/\1/p')
[ -f "$SO" ] && [ -x "$WORKLOAD" ] || { echo "inactive_instructions.sh: cannot find mtlab's native parts" >&2; exit 1; }

# instructions CONFIG ITERATIONS
instructions() {
    local out="$TMP/cg.$1.$2" env=()
    case $1 in
        none) ;;
        inactive) env=(LD_PRELOAD="$SO" MTLAB_OUT="$TMP/t.mtl" MTLAB_SAMPLE=524288 MTLAB_INACTIVE=1) ;;
        inactive-noGOT) env=(LD_PRELOAD="$SO" MTLAB_OUT="$TMP/t.mtl" MTLAB_SAMPLE=524288 MTLAB_INACTIVE=1 MTLAB_GOT=0) ;;
        active-512KiB) env=(LD_PRELOAD="$SO" MTLAB_OUT="$TMP/t.mtl" MTLAB_SAMPLE=524288 MTLAB_SAMPLE_SEED=1) ;;
        active-64KiB) env=(LD_PRELOAD="$SO" MTLAB_OUT="$TMP/t.mtl" MTLAB_SAMPLE=65536 MTLAB_SAMPLE_SEED=1) ;;
    esac
    env "${env[@]}" valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$out" \
        "$WORKLOAD" --threads 2 --size 512 --depth 10 --iterations "$2" >/dev/null 2>&1
    awk '/^summary:/ {print $2}' "$out"
}

printf '%-16s %16s %16s %18s\n' configuration "Ir (N=$N)" "Ir (N=$((2 * N)))" "instructions/pair"
for cfg in none inactive inactive-noGOT active-512KiB active-64KiB; do
    a=$(instructions "$cfg" "$N")
    b=$(instructions "$cfg" $((2 * N)))
    per=$(awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN { printf "%.2f", (b - a) / (2 * n) }')
    printf '%-16s %16s %16s %18s\n' "$cfg" "$a" "$b" "$per"
done
