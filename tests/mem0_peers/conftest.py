"""The peers tests: run inside the peers venv (``.ci/install-mem0-venvs.sh``: mem0ai 1.0.11 with
loongsuite-instrumentation-mem0), by ``tests/test_mem0_peers.py``. Elsewhere nothing here is collected."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["MEM0_TELEMETRY"] = "False"  # mem0's telemetry would try the network

try:
    importlib.metadata.version("mem0ai")
    importlib.metadata.version("loongsuite-instrumentation-mem0")
except importlib.metadata.PackageNotFoundError:
    collect_ignore_glob = ["test_*.py", "peers_app.py"]
else:
    collect_ignore_glob = ["peers_app.py"]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "mem0"))


@pytest.fixture
def llm_server() -> Iterator[object]:
    """The local OpenAI-compatible server, scripted per test with ``enqueue``."""
    from openai_server import ScriptedOpenAIServer

    with ScriptedOpenAIServer([]) as server:
        yield server
