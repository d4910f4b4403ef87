#!/usr/bin/env bash
# Build the real Jaeger v2 binary the Jaeger tests run against, from source, with the Go toolchain.
#
# Why a module in .ci/jaeger/ and not `go install github.com/jaegertracing/jaeger/cmd/jaeger@...`:
# Jaeger's go.mod has a replace directive (Shopify/sarama), which `go install pkg@version` refuses.
# .ci/jaeger/go.mod requires the Jaeger module as a `tool`, copies that replace, and its go.sum
# pins every dependency (taken from Jaeger's own go.sum), so the build needs nothing but the
# Go module proxy. Jaeger tags each release twice on one commit; the proxy serves the v1.x tag:
# v1.76.0 is Jaeger v2.13.0, and cmd/jaeger is the v2 (OpenTelemetry Collector based) binary.
#
# Idempotent: does nothing when the binary already exists.
#   MEMTRACE_JAEGER_BIN   where the binary goes (default: $HOME/.cache/memtrace/jaeger)
set -euo pipefail

JAEGER_MODULE_VERSION="v1.76.0"
JAEGER_V2_VERSION="v2.13.0"
BIN="${MEMTRACE_JAEGER_BIN:-$HOME/.cache/memtrace/jaeger}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-build-progress.sh
source "$HERE/go-build-progress.sh"   # go_build_with_progress: a line per 50 packages, one a minute

say() { printf 'install-jaeger: %s\n' "$*"; }
fail() { printf 'install-jaeger: error: %s\n' "$*" >&2; exit 1; }

# All in a function, read whole before it runs: editing or replacing this file while a
# build runs (a git pull) cannot make bash read a half-old script.
main() {
    if [[ -x "$BIN" ]]; then
        say "Jaeger already built at $BIN; nothing to do (delete it to rebuild)"
        return 0
    fi

    # The Go tarball's usual place, for shells whose PATH lacks it.
    if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
        PATH="/usr/local/go/bin:$PATH"
    fi
    command -v go >/dev/null 2>&1 || fail "the Go toolchain (go >= 1.24) is not on PATH"
    go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
    [[ "$go_minor" =~ ^[0-9]+$ && "$go_minor" -ge 24 ]] \
        || fail "Go $(go env GOVERSION) is too old: building Jaeger $JAEGER_V2_VERSION needs go >= 1.24"

    mkdir -p "$(dirname "$BIN")" || fail "cannot create $(dirname "$BIN")"
    tmp="$BIN.partial.$$"
    trap 'rm -f "$tmp"' EXIT

    say "building Jaeger $JAEGER_V2_VERSION (module github.com/jaegertracing/jaeger@$JAEGER_MODULE_VERSION)"
    say "with $(go env GOVERSION) into $BIN; a cold build takes several minutes on 2 cores"
    started=$SECONDS
    ldflags="-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=$JAEGER_V2_VERSION"
    # GOTOOLCHAIN=local: never try to download another toolchain; -mod=readonly: go.sum is the truth.
    if ! (cd "$HERE/jaeger" && go_build_with_progress install-jaeger env GOTOOLCHAIN=local go build -v \
            -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp" github.com/jaegertracing/jaeger/cmd/jaeger); then
        fail "go build of Jaeger failed (see the go output above; needs the Go module proxy)"
    fi
    "$tmp" version >/dev/null 2>&1 || fail "the built binary does not run: $tmp version failed"
    mv -f "$tmp" "$BIN"
    say "built $BIN in $((SECONDS - started)) s"
}

main "$@"
exit $?
