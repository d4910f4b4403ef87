# Sourced by install-jaeger.sh and install-otelcol.sh. A cold Go build of either takes 7-15 minutes on
# 2 shared cores and used to say nothing meanwhile. go_build_with_progress runs a `go build -v ...`
# (-v names each package as it is compiled) and prints one line every PROGRESS_EVERY packages with
# the time taken; while modules download (no package lines yet) and while linking, a line every
# minute says it is still at work. Go's own messages (errors have spaces or colons, package paths
# neither) go to stderr as they are. Returns go's exit status.
#   usage: go_build_with_progress PREFIX COMMAND... (a `go build -v` command line, run as given)

PROGRESS_EVERY="${PROGRESS_EVERY:-50}"

_go_progress_lines() {
    local prefix="$1" started="$2" count=0 line
    while IFS= read -r line; do
        if [[ "$line" =~ ^[A-Za-z0-9._~/+-]+$ ]]; then
            count=$((count + 1))
            if (( count % PROGRESS_EVERY == 0 )); then
                printf '%s: compiled %d packages (%d min %d s)\n' "$prefix" "$count" \
                    $(( (SECONDS - started) / 60 )) $(( (SECONDS - started) % 60 ))
            fi
        else
            printf '%s\n' "$line" >&2
        fi
    done
    printf '%s: compiled %d packages; linking\n' "$prefix" "$count"
}

go_build_with_progress() {
    local prefix="$1"; shift
    local started=$SECONDS heartbeat codes
    (   # its sleep is killed with it: a sleep left behind would hold the caller's output open
        trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
        while :; do
            sleep 60 & sleeper=$!
            wait "$sleeper"
            printf '%s: still building (%d min)\n' "$prefix" $(( (SECONDS - started) / 60 ))
        done
    ) &
    heartbeat=$!
    "$@" 2>&1 | _go_progress_lines "$prefix" "$started"
    codes=("${PIPESTATUS[@]}")
    kill "$heartbeat" 2>/dev/null
    wait "$heartbeat" 2>/dev/null || true
    return "${codes[0]}"
}
