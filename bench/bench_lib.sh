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
