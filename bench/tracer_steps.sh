#!/bin/sh
# Where a traced malloc/free pair's cycles go on malloc-test (2 threads x
# 1 M pairs of 512 bytes at call depth 10, as `mtlab bench tracer` runs it),
# measured with the only counter this VM offers, the TSC: the preload
# library is built again with one step of a traced call left out at a time
# (-DMTLAB_BENCH_SKIP, native/preload/internal.h), and each build runs the
# workload in the same rounds as the untraced workload and the whole
# library, in an order that rotates from round to round. The cost of a step
# is, per round, the whole library's cycles/op minus that build's; the
# script prints each configuration's median cycles/op and ratio to
# untraced, and each step's median cost with its min-max over the rounds.
# With valgrind installed it first counts each build's instructions per
# pair (cachegrind, one thread, 200 000 pairs minus 100 000: start-up and
# exit cancel), which the host's load does not move.
#
# The library is preloaded directly with the environment `mtlab record`
# gives a program (read from `mtlab record -- env`), so `record`'s own
# threads are not in these figures; `mtlab bench tracer` measures the
# whole of `record`.
#
#   bench/tracer_steps.sh MTLAB [ROUNDS] [THREADS] [ITERATIONS]
set -eu
mtlab=$1
rounds=${2:-9}
threads=${3:-2}
iterations=${4:-1000000}
here=$(cd "$(dirname "$0")" && pwd)
native=$here/../native
cc=${CC:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The builds, as crates/mtlab/build.rs builds the library and the workload.
version=$("$mtlab" --version | awk '{ print $2 }')
common="-O2 -g -fno-omit-frame-pointer -Wall -Wextra -pthread"
# name:mask — the steps of internal.h's MTLAB_SKIP_* left out.
variants="full:0 no-tsc:1 no-stack:2 no-heap-facts:4 no-write:8 no-event:16 no-event-no-tsc:17 no-record:32"
for v in $variants; do
    name=${v%%:*}
    # shellcheck disable=SC2086
    $cc $common "-DMTLAB_VERSION=\"$version\"" "-DMTLAB_BENCH_SKIP=${v#*:}" -fPIC -shared -fvisibility=hidden \
        -ftls-model=initial-exec -fexceptions -o "$work/$name.so" "$native"/preload/*.c -ldl -lm
done
# shellcheck disable=SC2086
$cc $common -o "$work/malloc-test" "$native/bench/malloc_test.c"

# What `mtlab record` sets for a program, its own output file and parent aside.
"$mtlab" record -o "$work/probe.mtl" -- /usr/bin/env >"$work/env" 2>/dev/null
settings=$(grep -E '^MTLAB_(STACKS|DEPTH|FOLLOW|FREE_STACKS|UNWIND|TSC_HZ|TIME_SAMPLE)=' "$work/env" | tr '\n' ' ')
echo "record's settings: $settings"

# One run: its cycles per pair, into $work/value. The workload is a child of
# this shell (not of a $(...) subshell), so MTLAB_PARENT=$$ makes it the
# root process, as under `record`.
run() {
    if [ "$1" = untraced ]; then
        "$work/malloc-test" --threads "$threads" --size 512 --depth 10 --iterations "$iterations" >"$work/out"
    else
        rm -rf "$work/t.mtl" "$work/t.mtl.d"
        # shellcheck disable=SC2086
        env $settings MTLAB_OUT="$work/t.mtl" MTLAB_PARENT=$$ LD_PRELOAD="$work/$1.so" \
            "$work/malloc-test" --threads "$threads" --size 512 --depth 10 --iterations "$iterations" >"$work/out"
        # A build that writes must have written the trace (else it ran untraced).
        case $1 in no-write | no-event* | no-record) ;; *)
            [ -s "$work/t.mtl" ] || { echo "tracer_steps: $1 wrote no trace" >&2; exit 1; } ;;
        esac
    fi
    sed -n 's/.*"cycles_per_op":\([0-9.]*\).*/\1/p' "$work/out" >"$work/value"
}

names="untraced"
for v in $variants; do names="$names ${v%%:*}"; done

# Instructions per pair: deterministic, one thread.
instructions() { # name, iterations
    rm -rf "$work/i.mtl" "$work/i.mtl.d"
    pre=""
    [ "$1" = untraced ] || pre="$work/$1.so"
    # shellcheck disable=SC2086
    env $settings MTLAB_OUT="$work/i.mtl" MTLAB_PARENT=$$ LD_PRELOAD="$pre" \
        valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        "$work/malloc-test" --threads 1 --size 512 --depth 10 --iterations "$2" --warmup 0 2>&1 >/dev/null |
        sed -n 's/.*I *refs: *//p' | tr -d ,
}
if command -v valgrind >/dev/null; then
    echo "instructions per malloc/free pair (cachegrind, 1 thread):"
    for n in $names; do
        a=$(instructions "$n" 100000)
        b=$(instructions "$n" 200000)
        echo "  $n $(( (b - a) / 100000 ))"
    done
else
    echo "valgrind not found: no instruction counts"
fi
count=$(echo "$names" | wc -w)
r=0
while [ "$r" -lt "$rounds" ]; do
    # Rotate the order: no configuration always runs first or after the same one.
    i=0
    for n in $names; do
        k=$(( (i + r) % count ))
        eval "slot_$k=$n"
        i=$((i + 1))
    done
    line=""
    k=0
    while [ "$k" -lt "$count" ]; do
        eval "n=\$slot_$k"
        run "$n"
        line="$line $n=$(cat "$work/value")"
        k=$((k + 1))
    done
    echo "round $((r + 1)):$line"
    echo "$line" >>"$work/rounds"
    r=$((r + 1))
done

uptime
awk -v names="$names" '
function median(a, n,    i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    for (f = 1; f <= NF; f++) { split($f, kv, "="); v[NR, kv[1]] = kv[2] }
}
END {
    k = split(names, name, " ")
    printf "%-18s %14s %22s %28s\n", "configuration", "cycles/op", "x untraced [min-max]", "step: full minus this [min-max]"
    for (i = 1; i <= k; i++) {
        n = name[i]
        for (r = 1; r <= NR; r++) { c[r] = v[r, n]; x[r] = v[r, n] / v[r, "untraced"]; d[r] = v[r, "full"] - v[r, n] }
        for (r = 1; r <= NR; r++) { xs[r] = x[r]; ds[r] = d[r] }
        lo = hi = x[1]; dlo = dhi = d[1]
        for (r = 2; r <= NR; r++) { if (x[r] < lo) lo = x[r]; if (x[r] > hi) hi = x[r]; if (d[r] < dlo) dlo = d[r]; if (d[r] > dhi) dhi = d[r] }
        printf "%-18s %14.1f %10.2f [%.2f-%.2f]", n, median(c, NR), median(xs, NR), lo, hi
        if (n != "untraced" && n != "full") printf " %14.1f [%.1f, %.1f]", median(ds, NR), dlo, dhi
        printf "\n"
    }
}' "$work/rounds"
