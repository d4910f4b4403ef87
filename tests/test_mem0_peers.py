"""memtrace's mem0 instrumentor beside loongsuite-instrumentation-mem0, in the peers virtualenv.

``.ci/install-mem0-venvs.sh`` builds ``mem0ai-1.0.11-peers`` (mem0ai 1.0.11, the other instrumentation,
this checkout); this test runs ``tests/mem0_peers`` inside it as a subprocess pytest, failing with its
output. An absent venv skips with the reason locally; under ``CI`` it fails (CI builds it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENVS = Path(os.environ.get("MEMTRACE_MEM0_VENVS", Path.home() / ".cache" / "memtrace" / "venvs"))
PEERS = VENVS / "mem0ai-1.0.11-peers"  # .ci/install-mem0-venvs.sh: PEERS_VERSION, suffix "peers"


@pytest.mark.slow
def test_mem0_beside_loongsuite() -> None:
    python = PEERS / "bin" / "python"
    if not python.exists():
        message = (f"no peers venv at {PEERS} (mem0ai 1.0.11 with loongsuite-instrumentation-mem0: "
                   "bash .ci/install-mem0-venvs.sh)")
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must install it")
        pytest.skip(message)
    env = {**os.environ, "MEM0_TELEMETRY": "False", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header",
               str(ROOT / "tests" / "mem0_peers")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    summary = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    output = f"{done.stdout[-8000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"tests/mem0_peers failed:\n{output}"
    assert summary and " passed" in summary[0], f"no peers test ran: {done.stdout[-2000:]}"
    print(f"mem0 peers: {summary[0]}", file=sys.stderr)
