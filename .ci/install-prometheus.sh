#!/usr/bin/env bash
# Build the real Prometheus server that tests/test_prometheus_promql.py runs (the PromQL of
# docs/signals.md over what `memtrace serve --metrics-otlp` exports to Prometheus's OTLP receiver),
# from source, with the Go toolchain and the Go module proxy.
#
# .ci/prometheus/go.mod requires Prometheus as a `tool` and its go.sum pins every dependency, so the
# build needs nothing but the module proxy (-mod=readonly: go.sum is the truth). The build tag
# remove_all_sd leaves out the cloud service-discovery plugins (AWS, Azure, GCE, Kubernetes, ...):
# the tests scrape nothing, and the binary builds in a fraction of the time. Without the
# `builtinassets` tag the web UI is not embedded; the HTTP API, which the tests use, is all there.
#
# Idempotent: does nothing when the binary exists and was built from .ci/prometheus as it is now
# (a stamp beside it holds the checksum of go.mod and go.sum).
#   MEMTRACE_PROMETHEUS_BIN   where the binary goes (default: $HOME/.cache/memtrace/prometheus)
set -euo pipefail

PROMETHEUS_MODULE_VERSION="v0.316.0"
PROMETHEUS_VERSION="3.16.0"
BIN="${MEMTRACE_PROMETHEUS_BIN:-$HOME/.cache/memtrace/prometheus}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-build-progress.sh
source "$HERE/go-build-progress.sh"   # go_build_with_progress: a line per 50 packages, one a minute

say() { printf 'install-prometheus: %s\n' "$*"; }
fail() { printf 'install-prometheus: error: %s\n' "$*" >&2; exit 1; }

# All in a function, read whole before it runs: editing or replacing this file while a
# build runs (a git pull) cannot make bash read a half-old script.
main() {
    stamp="$(cd "$HERE/prometheus" && cat go.mod go.sum | sha256sum | cut -d' ' -f1)"
    if [[ -x "$BIN" && "$(cat "$BIN.sources" 2>/dev/null)" == "$stamp" ]]; then
        say "Prometheus already built at $BIN from these sources; nothing to do (delete it to rebuild)"
        return 0
    fi

    # The Go tarball's usual place, for shells whose PATH lacks it.
    if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
        PATH="/usr/local/go/bin:$PATH"
    fi
    command -v go >/dev/null 2>&1 || fail "the Go toolchain (go >= 1.26.7) is not on PATH"
    want="$(sed -nE 's/^go ([0-9.]+)$/\1/p' "$HERE/prometheus/go.mod")"
    have="$(go env GOVERSION | sed -E 's/^go//')"
    [[ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" == "$want" ]] \
        || fail "Go $have is too old: building Prometheus $PROMETHEUS_VERSION needs go >= $want"

    mkdir -p "$(dirname "$BIN")" || fail "cannot create $(dirname "$BIN")"
    tmp="$BIN.partial.$$"
    trap 'rm -f "$tmp"' EXIT

    say "building Prometheus $PROMETHEUS_VERSION (module github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION)"
    say "with $(go env GOVERSION) into $BIN; a cold build takes several minutes on 2 cores"
    started=$SECONDS
    ldflags="-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION"
    # GOTOOLCHAIN=local: never try to download another toolchain; -mod=readonly: go.sum is the truth.
    if ! (cd "$HERE/prometheus" && go_build_with_progress install-prometheus env GOTOOLCHAIN=local go build -v \
            -mod=readonly -trimpath -tags remove_all_sd -ldflags "$ldflags" -o "$tmp" \
            github.com/prometheus/prometheus/cmd/prometheus); then
        fail "go build of Prometheus failed (see the go output above; needs the Go module proxy)"
    fi
    "$tmp" --version >/dev/null 2>&1 || fail "the built binary does not run: $tmp --version failed"
    mv -f "$tmp" "$BIN"
    printf '%s\n' "$stamp" > "$BIN.sources"
    say "built $BIN in $((SECONDS - started)) s"
}

main "$@"
exit $?
