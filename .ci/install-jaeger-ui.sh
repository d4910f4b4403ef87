#!/usr/bin/env bash
# Unpack the real Jaeger UI (v1.76.0, the UI Jaeger v2.13.0 pins) that the browser tests serve
# through Jaeger's `ui.assets_path`. A `go build` Jaeger has only a placeholder page, and the UI's
# source cannot be fetched from CI, so the built folder is kept in ../shared/jaeger-ui/ (its README
# says how it was built). The tarball is checked against the sha256 that README gives.
#
# Idempotent: does nothing when the UI is already unpacked (DIR/build/index.html exists).
#   MEMTRACE_JAEGER_UI       where it goes (default: $HOME/.cache/memtrace/jaeger-ui; assets in build/)
#   MEMTRACE_JAEGER_UI_TAR   the tarball (default: ../shared/jaeger-ui/jaeger-ui-v1.76.0.tar.gz)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="${MEMTRACE_JAEGER_UI:-$HOME/.cache/memtrace/jaeger-ui}"
TAR="${MEMTRACE_JAEGER_UI_TAR:-$HERE/../../shared/jaeger-ui/jaeger-ui-v1.76.0.tar.gz}"
SHA256="675695e69f9a54322c2bdefb46d21a091c40801d98b97dc8ae053732496386ee"

say() { printf 'install-jaeger-ui: %s\n' "$*"; }
fail() { printf 'install-jaeger-ui: error: %s\n' "$*" >&2; exit 1; }

main() {
    if [[ -f "$DIR/build/index.html" ]]; then
        say "Jaeger UI already unpacked at $DIR/build; nothing to do (delete it to unpack again)"
        return 0
    fi
    [[ -f "$TAR" ]] || fail "$TAR not found (the built Jaeger UI; see ../shared/jaeger-ui/README.md)"
    actual="$(sha256sum "$TAR" | cut -d' ' -f1)"
    [[ "$actual" == "$SHA256" ]] || fail "$TAR has sha256 $actual, expected $SHA256"
    mkdir -p "$DIR" || fail "cannot create $DIR"
    tmp="$(mktemp -d "$DIR/.partial.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    tar -xzf "$TAR" -C "$tmp" || fail "cannot unpack $TAR"
    [[ -f "$tmp/build/index.html" ]] || fail "$TAR holds no build/index.html"
    rm -rf "$DIR/build"
    mv "$tmp/build" "$DIR/build"  # appears whole or not at all: a test never sees half a UI
    say "Jaeger UI unpacked into $DIR/build"
}

main "$@"
