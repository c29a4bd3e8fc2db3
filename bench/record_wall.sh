#!/usr/bin/env bash
# `mtlab record`'s own wall time, start to last line, finishing included
# (issue 38 §3), beside the program untraced and under heaptrack (its default
# compressed trace), on six mimalloc-bench programs: cfrac, espresso,
# glibc-simple, mstress, alloc-test, cache-scratch. Rounds interleave the
# three (round r runs each program untraced, recorded and under heaptrack,
# in an order rotated by round); prints per program the median wall time
# untraced, each tool's median ratio to it with the range of the per-round
# ratios, and the median of `record -v`'s stages: the program, everything
# after it, and the finish's thread time by part (join, columns, compression).
#
#   bench/record_wall.sh -s MIMALLOC_BENCH [-r ROUNDS] [-b MTLAB] [-p NAME]... [-H]
#
# -s: a checkout of github.com/daanx/mimalloc-bench (its bench/ directory is
# compiled here with cc and c++, -O3, as its CMakeLists does); -r: rounds
# (default 3); -b: the mtlab build (default this tree's target/release/mtlab);
# -p: only the named programs; -H: no heaptrack runs.
set -euo pipefail

ROUNDS=3
HERE=$(cd "$(dirname "$0")" && pwd)
MTLAB=$HERE/../target/release/mtlab
SRC=
ONLY=()
HEAPTRACK=1
while getopts "s:r:b:p:Hh" opt; do
    case $opt in
        s) SRC=$OPTARG ;;
        r) ROUNDS=$OPTARG ;;
        b) MTLAB=$OPTARG ;;
        p) ONLY+=("$OPTARG") ;;
        H) HEAPTRACK=0 ;;
        h) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "record_wall.sh: -h for usage" >&2; exit 2 ;;
    esac
done
[ -n "$SRC" ] && [ -d "$SRC/bench/cfrac" ] || { echo "record_wall.sh: -s must name a mimalloc-bench checkout (with bench/cfrac)" >&2; exit 2; }
ME=record_wall.sh
# shellcheck source=bench/bench_lib.sh
source "$HERE/bench_lib.sh"
need_mtlab
tools=(cc c++ python3)
[ "$HEAPTRACK" = 1 ] && tools+=(heaptrack)
need_tools "gcc g++ python3 heaptrack" "${tools[@]}"
make_tmp
B=$SRC/bench
CFLAGS=(-O3 -DNDEBUG -w)
(
    cd "$B/cfrac"
    cc "${CFLAGS[@]}" -std=gnu89 -DNOMEMOPT=1 -o "$TMP/cfrac" cfrac.c pops.c pconst.c pio.c pabs.c pneg.c pcmp.c podd.c \
        phalf.c padd.c psub.c pmul.c pdivmod.c psqrt.c ppowmod.c atop.c ptoa.c itop.c utop.c ptou.c errorp.c pfloat.c \
        pidiv.c pimod.c picmp.c primes.c pcfrac.c pgcd.c -lm
    cd "$B/espresso"
    cc "${CFLAGS[@]}" -std=gnu89 -o "$TMP/espresso" cofactor.c cols.c compl.c contain.c cubestr.c cvrin.c cvrm.c cvrmisc.c \
        cvrout.c dominate.c equiv.c espresso.c essen.c exact.c expand.c gasp.c getopt.c gimpel.c globals.c hack.c indep.c \
        irred.c main.c map.c matrix.c mincov.c opo.c pair.c part.c primes.c reduce.c rows.c set.c setc.c sharp.c \
        sminterf.c solution.c sparse.c unate.c utility.c verify.c -lm
)
c++ "${CFLAGS[@]}" -std=c++17 -DBENCH=4 -o "$TMP/alloc-test" "$B/alloc-test/test_common.cpp" "$B/alloc-test/allocator_tester.cpp" -pthread
c++ "${CFLAGS[@]}" -o "$TMP/cache-scratch" "$B/cache-scratch/cache-scratch.cpp" -pthread
cc "${CFLAGS[@]}" -o "$TMP/mstress" "$B/mstress/mstress.c" -pthread
cc "${CFLAGS[@]}" -o "$TMP/glibc-simple" "$B/glibc-bench/bench-malloc-simple.c" -pthread

# name|command, as mimalloc-bench's bench.sh runs them (the N-thread forms with N = 2, this machine's CPUs).
PROGRAMS=(
    "cfrac|$TMP/cfrac 17545186520507317056371138836327483792789528"
    "espresso|$TMP/espresso $B/espresso/largest.espresso"
    "glibc-simple|$TMP/glibc-simple"
    "mstress|$TMP/mstress 2 50 25"
    "alloc-test|$TMP/alloc-test 2"
    "cache-scratch|$TMP/cache-scratch 2 1000 1 2000000 2"
)

now() { date +%s.%N; }
# Runs `$@` from TMP (glibc-simple writes a file there) and prints its wall seconds.
timed() {
    local t0 t1
    t0=$(now)
    (cd "$TMP" && "$@") >/dev/null 2>>"$TMP/err" || true
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'
}

LOG=$TMP/log # round|program|tool|wall|stages line
TOOLS=(untraced mtlab)
[ "$HEAPTRACK" = 1 ] && TOOLS+=(heaptrack)
echo "record_wall.sh: $(uptime | sed 's/.*load/load/'); $ROUNDS rounds; mtlab $("$MTLAB" --version 2>/dev/null || echo "$MTLAB")" >&2
for ((r = 0; r < ROUNDS; r++)); do
    for entry in "${PROGRAMS[@]}"; do
        name=${entry%%|*} cmd=${entry#*|}
        wanted "$name" || continue
        read -r -a argv <<<"$cmd"
        n=${#TOOLS[@]}
        for ((k = 0; k < n; k++)); do
            tool=${TOOLS[$(((k + r) % n))]}
            case $tool in
                untraced) w=$(timed "${argv[@]}"); st= ;;
                mtlab)
                    : >"$TMP/err"
                    w=$(timed "$MTLAB" record -v -o "$TMP/$name.mtl" -- "${argv[@]}")
                    st=$(grep -o 'stages: .*' "$TMP/err" || true)
                    rm -rf "$TMP/$name.mtl" "$TMP/$name.mtl.d" ;;
                heaptrack)
                    w=$(timed heaptrack -o "$TMP/$name.ht" "${argv[@]}"); st=
                    rm -f "$TMP/$name".ht* ;;
            esac
            echo "$r|$name|$tool|$w|$st" >>"$LOG"
            echo "  round $((r + 1)) $name $tool ${w}s" >&2
        done
    done
done

python3 - "$LOG" <<'EOF'
import re, statistics, sys
rows = [l.rstrip("\n").split("|", 4) for l in open(sys.argv[1])]
names = list(dict.fromkeys(r[1] for r in rows))
wall = {(r[0], r[1], r[2]): float(r[3]) for r in rows}
stages = {}
for r in rows:
    if r[2] == "mtlab" and r[4]:
        nums = [float(x) for x in re.findall(r"([0-9.]+) s", r[4])]
        stages.setdefault(r[1], []).append(nums)
med = statistics.median
tools = [t for t in ("mtlab", "heaptrack") if any(r[2] == t for r in rows)]
print("program | untraced s | " + " | ".join(f"{t} × untraced (range)" for t in tools)
      + " | mtlab stages (median s): program, after it [stop, finish; finish thread time: join, columns, compression]")
overall = {t: [] for t in tools}
for n in names:
    rounds = sorted({r[0] for r in rows if r[1] == n})
    base = [wall[(k, n, "untraced")] for k in rounds]
    cells = []
    for t in tools:
        ratios = [wall[(k, n, t)] / wall[(k, n, "untraced")] for k in rounds]
        overall[t].append(med(ratios))
        cells.append(f"{med(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})")
    s = stages.get(n)
    st = "–"
    if s:
        m = [med(col) for col in zip(*s)]
        st = f"{m[0]:.2f}, {m[1]:.2f} [{m[2]:.2f}, {m[3]:.2f}; {m[4]:.2f}, {m[5]:.2f}, {m[6]:.2f}]"
    print(f"{n} | {med(base):.2f} | " + " | ".join(cells) + f" | {st}")
print("median over the programs: " + ", ".join(f"{t} {med(v):.2f}×" for t, v in overall.items()))
EOF
