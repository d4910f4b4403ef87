#!/usr/bin/env bash
# Virtual environments for the mem0 generation tests (tests/mem0/, run by tests/test_mem0_generations.py):
# one per supported end of the range the instrumentor declares (package.py: mem0ai >= 1.0.0, < 3),
# each with the project installed editable with its [mem0] extra, pytest, and opentelemetry-distro
# (for `opentelemetry-instrument`).
#
# Why separate venvs: mem0ai 1.x and 2.x cannot share one environment, and neither belongs in the
# project's own .venv (mem0ai is the user's dependency, not ours).
#
# Cached under $MEMTRACE_MEM0_VENVS (default $HOME/.cache/memtrace/venvs/mem0ai-<version>). The
# third-party packages are installed once per version and pyproject.toml (a marker file records it);
# the project itself is re-installed editable (no dependencies, seconds) on every run, so a venv
# always points at the checkout that runs this script.
#
# Peers venv (tests/test_mem0_peers.py): mem0ai 1.0.11 with the other mem0 instrumentation registered in
# the same `opentelemetry_instrumentor` group, loongsuite-instrumentation-mem0, to test that both trace
# one program. Built by default, cached like the others under $BASE/mem0ai-1.0.11-peers;
# MEMTRACE_MEM0_PEERS=0 skips it. OpenLIT 1.45.0 is not in it: `pip install openlit==1.45.0` ends in
# ResolutionImpossible on Python 3.11, with or without mem0ai (docs/mem0.md).
set -euo pipefail

VERSIONS=("1.0.11" "2.2.1")
# Pinned so a cached venv and a fresh one resolve alike; bump together with docs/mem0.md.
EXTRA_PACKAGES=("pytest>=8" "opentelemetry-distro" "opentelemetry-instrumentation>=0.48b0" "wrapt>=1.14")
PEERS_VERSION="1.0.11"
# The versions the peers test was written against (loongsuite's mem0 instrumentor supports mem0ai 1.x only).
PEER_PACKAGES=("loongsuite-instrumentation-mem0==0.9.0")
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE="${MEMTRACE_MEM0_VENVS:-$HOME/.cache/memtrace/venvs}"
PYTHON="${PYTHON:-python3}"

say() { printf 'install-mem0-venvs: %s\n' "$*"; }
fail() { printf 'install-mem0-venvs: error: %s\n' "$*" >&2; exit 1; }

# The marker names everything that decides the third-party install: a change re-creates the venv.
marker_text() {
    printf 'mem0ai==%s\n' "$1"
    shift
    printf '%s\n' "$@"
    "$PYTHON" -c 'import sys; print(sys.version.split()[0])'
    # The project's own dependencies are installed once too: a changed pyproject.toml rebuilds.
    sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1
}

install_one() {
    # $2 (optional): the venv's name suffix; then the peer packages are installed beside mem0ai.
    local version="$1" suffix="${2:-}" venv="$BASE/mem0ai-$1${2:+-$2}"
    local marker="$venv/.memtrace-installed" extra=("${EXTRA_PACKAGES[@]}")
    if [[ -n "$suffix" ]]; then extra+=("${PEER_PACKAGES[@]}"); fi
    if [[ -f "$marker" && "$(cat "$marker")" == "$(marker_text "$version" "${extra[@]}")" && -x "$venv/bin/python" ]]; then
        say "mem0ai $version${suffix:+ ($suffix)}: cached at $venv"
    else
        say "mem0ai $version${suffix:+ ($suffix)}: creating $venv (a few minutes on 2 cores)"
        rm -rf "$venv"
        "$PYTHON" -m venv "$venv" || fail "cannot create $venv"
        "$venv/bin/pip" install -q --disable-pip-version-check "mem0ai==$version" "${extra[@]}" \
            || fail "pip install mem0ai==$version ${extra[*]} failed (see pip's output above)"
        # The project's own dependencies, once, so the per-run install below needs none.
        "$venv/bin/pip" install -q --disable-pip-version-check -e "$ROOT[mem0]" \
            || fail "pip install -e $ROOT[mem0] failed"
        marker_text "$version" "${extra[@]}" > "$marker"
    fi
    # Always: point the venv at this checkout (a CI clone lives elsewhere than the cached venv's).
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$ROOT" \
        || fail "pip install --no-deps -e $ROOT failed in $venv"
    # The benchmark too (benchmarks/, a distribution of its own): the real-mem0 part's driver
    # (memtrace_bench.mem0_real.driver) runs in this venv. No dependencies: the driver imports none of
    # the benchmark's numpy or wordllama.
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$ROOT/benchmarks" \
        || fail "pip install --no-deps -e $ROOT/benchmarks failed in $venv"
    MEM0_TELEMETRY=False "$venv/bin/python" -c "import mem0, memtrace_otel.instrument.mem0, memtrace_bench.mem0_real.world" \
        || fail "mem0ai $version venv cannot import mem0, the instrumentor and the benchmark's driver"
    say "mem0ai $version${suffix:+ ($suffix)}: ready ($venv/bin/python)"
}

main() {
    mkdir -p "$BASE" || fail "cannot create $BASE"
    for version in "${VERSIONS[@]}"; do
        install_one "$version"
    done
    if [[ "${MEMTRACE_MEM0_PEERS:-1}" != "0" ]]; then
        install_one "$PEERS_VERSION" peers
    fi
}

main "$@"
exit $?
