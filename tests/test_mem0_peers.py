"""memtrace's mem0 instrumentor beside loongsuite-instrumentation-mem0, in the peers virtualenv.

``.ci/install-mem0-venvs.sh`` builds ``mem0ai-1.0.11-peers`` (mem0ai 1.0.11, the other instrumentation,
this checkout); this test runs ``tests/mem0_peers`` inside it as a subprocess pytest, failing with its
output. An absent venv skips with the reason locally; under ``CI`` it fails (CI builds it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from process_harness import MEM0_VENVS, pytest_in_venv

ROOT = Path(__file__).resolve().parent.parent
PEERS = MEM0_VENVS / "mem0ai-1.0.11-peers"  # .ci/install-mem0-venvs.sh: PEERS_VERSION, suffix "peers"


@pytest.mark.slow
def test_mem0_beside_loongsuite() -> None:
    summary = pytest_in_venv(PEERS / "bin" / "python", ROOT / "tests" / "mem0_peers", "tests/mem0_peers",
                             f"no peers venv at {PEERS} (mem0ai 1.0.11 with loongsuite-instrumentation-mem0: "
                             "bash .ci/install-mem0-venvs.sh)")
    print(f"mem0 peers: {summary}", file=sys.stderr)
