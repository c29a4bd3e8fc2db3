# Sourced by the attach benchmarks: builds bench/attach_loop.c in a fresh
# work directory (removed, with the loop, on exit), starts it with THREADS
# threads (default 8) and sets $pid to it and $src to bench/.
src=$(realpath "$(dirname "${BASH_SOURCE[1]}")")
threads=${THREADS:-8}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
cc -O2 -pthread -o attach_loop "$src/attach_loop.c"
./attach_loop "$threads" > out.txt &
pid=$!
sleep 1
