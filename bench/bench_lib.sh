# Sourced by the bench scripts that run named programs beside heaptrack
# (live_programs.sh, side_by_side.sh, record_wall.sh): what they all need
# once their options are read. Each sets ME (its name, for messages),
# MTLAB and ONLY (the -p names) first.

# Fails with what to install unless every TOOL is on PATH.
need_tools() { # HINT TOOL...
    local hint=$1 tool
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "$ME: $tool not found (apt-get install $hint)" >&2; exit 1; }
    done
}

need_mtlab() {
    [ -x "$MTLAB" ] || { echo "$ME: $MTLAB is not an executable mtlab (cargo build --release)" >&2; exit 1; }
}

# A work directory in $TMP, removed on exit.
make_tmp() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/${ME%.sh}.XXXXXX")
    trap 'rm -rf "$TMP"' EXIT
}

# Whether program NAME is to run (-p given it, or no -p at all).
wanted() {
    [ ${#ONLY[@]} -eq 0 ] && return 0
    local n
    for n in "${ONLY[@]}"; do [ "$n" = "$1" ] && return 0; done
    return 1
}

# Allocation calls (malloc, calloc, realloc, the aligned ones, operator new)
# in mtlab's trace FILE, as `mtlab report --json` counts them.
mtlab_allocs() { # FILE
    "$MTLAB" report --json "$1" 2>/dev/null | python3 -c '
import json, sys
f = json.load(sys.stdin)["functions"]
skip = ("free", "operator delete", "mmap", "munmap", "mremap", "sbrk", "brk", "malloc_usable_size")
print(sum(v["calls"] for k, v in f.items() if not k.startswith(skip)))'
}

# heaptrack's trace HT is compared with mtlab's MTL only when it holds the
# allocation calls MTL holds, within 0.1 %: heaptrack 1.4's
# heaptrack_interpret can throw std::bad_alloc part-way (cc1 on duktape.c
# here, at ~19 GB) and leave a trace of the calls before. Prints `whole`, or
# `cut H/M` (heaptrack_print's count against mtlab's).
heaptrack_whole() { # HT MTL
    local h m
    h=$(heaptrack_print "$1" 2>/dev/null | awk '/^calls to allocation functions:/ { print $5 }')
    m=$(mtlab_allocs "$2")
    if awk -v h="${h:-0}" -v m="${m:-0}" 'BEGIN { exit !(m > 0 && h >= m * 0.999 && h <= m * 1.001) }'; then
        echo whole
    else
        echo "cut ${h:-?}/${m:-?}"
    fi
}
