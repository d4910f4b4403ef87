#!/usr/bin/env bash
# Build the small OpenTelemetry Collector the live-pipeline tests run (in front of `memtrace serve`),
# from source, with the Go toolchain and the Go module proxy.
#
# .ci/otelcol/ is the OpenTelemetry Collector Builder's (ocb v0.140.0) output for the manifest
# collector/builder-config.yaml: main.go and components.go, with the go.mod and go.sum made once
# from the proxy. Pinned: contrib v0.140.1 (loadbalancing, file exporters), core v0.140.0 /
# stable v1.46.0 (the manifest says why not v0.139.0: its loadbalancing exporter is broken).
# The checksum database answers 404 for many of these modules (the collector core v0.140.0 /
# v1.46.0 ones tried, the contrib ones, aws-sdk-go-v2/service/servicediscovery), so this build
# must not consult it: go.sum already holds every hash, and -mod=readonly makes it the truth (a
# module missing from it fails the build instead of being looked up). So no GONOSUMDB, GOSUMDB or
# GOFLAGS setting is needed here. How .ci/otelcol/ was made, and how to remake it: collector/README.md.
#
# Idempotent: does nothing when the binary exists and was built from the sources in .ci/otelcol as
# they are now (a stamp beside it holds their checksum); a changed manifest (a component added)
# rebuilds it.
#   MEMTRACE_OTELCOL_BIN   where the binary goes (default: $HOME/.cache/memtrace/otelcol)
set -euo pipefail

OTELCOL_VERSION="v0.140.1"
BIN="${MEMTRACE_OTELCOL_BIN:-$HOME/.cache/memtrace/otelcol}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-build-progress.sh
source "$HERE/go-build-progress.sh"   # go_build_with_progress: a line per 50 packages, one a minute

say() { printf 'install-otelcol: %s\n' "$*"; }
fail() { printf 'install-otelcol: error: %s\n' "$*" >&2; exit 1; }

# All in a function, read whole before it runs: editing or replacing this file while a
# build runs (a git pull) cannot make bash read a half-old script.
main() {
    [[ -f "$HERE/otelcol/go.sum" && -f "$HERE/otelcol/components.go" ]] \
        || fail "the generated sources are missing from $HERE/otelcol (see collector/README.md)"
    stamp="$(cd "$HERE/otelcol" && cat go.mod go.sum ./*.go | sha256sum | cut -d' ' -f1)"
    if [[ -x "$BIN" && "$(cat "$BIN.sources" 2>/dev/null)" == "$stamp" ]]; then
        say "Collector already built at $BIN from these sources; nothing to do (delete it to rebuild)"
        return 0
    fi
    [[ -x "$BIN" ]] && say "the sources in $HERE/otelcol changed since $BIN was built: rebuilding"

    # The Go tarball's usual place, for shells whose PATH lacks it.
    if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
        PATH="/usr/local/go/bin:$PATH"
    fi
    command -v go >/dev/null 2>&1 || fail "the Go toolchain (go >= 1.24) is not on PATH"
    go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
    [[ "$go_minor" =~ ^[0-9]+$ && "$go_minor" -ge 24 ]] \
        || fail "Go $(go env GOVERSION) is too old: building the Collector $OTELCOL_VERSION needs go >= 1.24"

    mkdir -p "$(dirname "$BIN")" || fail "cannot create $(dirname "$BIN")"
    tmp="$BIN.partial.$$"
    trap 'rm -f "$tmp"' EXIT

    say "building the OpenTelemetry Collector $OTELCOL_VERSION (ocb output in .ci/otelcol)"
    say "with $(go env GOVERSION) into $BIN; a cold build takes several minutes on 2 cores"
    started=$SECONDS
    # GOTOOLCHAIN=local: never download another toolchain; -mod=readonly: go.sum is the truth.
    # CGO_ENABLED=0 as ocb builds it (a static binary); -buildvcs=false: the main package sits in
    # this repository, and its git state must not change (or break) the build.
    # nice: the machines have 2 cores shared with other work.
    if ! (cd "$HERE/otelcol" && go_build_with_progress install-otelcol env GOTOOLCHAIN=local CGO_ENABLED=0 \
            nice -n 10 go build -v -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w" -o "$tmp" .); then
        fail "go build of the Collector failed (see the go output above; needs the Go module proxy)"
    fi
    components="$("$tmp" components 2>/dev/null)" \
        || fail "the built binary does not run: $tmp components failed"
    exporters="$(sed -n '/^exporters:/,/^[a-z]/p' <<<"$components")"
    for kind in loadbalancing file otlp otlphttp debug; do
        grep -q -- "- name: $kind\$" <<<"$exporters" \
            || fail "the built binary lacks the '$kind' exporter ($tmp components)"
    done
    processors="$(sed -n '/^processors:/,/^[a-z]/p' <<<"$components")"
    for kind in batch tail_sampling; do
        grep -q -- "- name: $kind\$" <<<"$processors" \
            || fail "the built binary lacks the '$kind' processor ($tmp components)"
    done
    mv -f "$tmp" "$BIN"
    printf '%s\n' "$stamp" > "$BIN.sources"
    say "built $BIN ($("$BIN" --version)) in $((SECONDS - started)) s"
}

# One line: bash has parsed the exit before main runs, so a file edited meanwhile is never read on.
main "$@"; exit $?
