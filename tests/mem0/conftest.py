"""The mem0 generation tests: run inside a venv with mem0ai (``.ci/install-mem0-venvs.sh``).

The main suite runs them through ``tests/test_mem0_generations.py`` in each venv; in
an environment without mem0ai (the project's own .venv) nothing here is collected.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["MEM0_TELEMETRY"] = "False"  # mem0's telemetry would try the network

try:  # by distribution: the name "mem0" alone would find this very directory (tests/ is on sys.path)
    importlib.metadata.version("mem0ai")
except importlib.metadata.PackageNotFoundError:
    collect_ignore_glob = ["test_*.py", "mem0_app.py", "mem0_script.py"]
else:
    collect_ignore_glob = ["mem0_app.py"]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


@pytest.fixture
def llm_server() -> Iterator[object]:
    """The local OpenAI-compatible server, scripted per test with ``enqueue``."""
    from openai_server import ScriptedOpenAIServer

    with ScriptedOpenAIServer([]) as server:
        yield server


@pytest.fixture
def instrumented(tracer_provider: object) -> Iterator[object]:
    """The instrumentor on the test's in-memory pipeline, removed afterwards."""
    from memtrace_otel.instrument.mem0 import Mem0Instrumentor

    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    yield instrumentor
    instrumentor.uninstrument()


@pytest.fixture
def memory(llm_server: object, tmp_path: Path) -> Iterator[object]:
    """A real mem0 ``Memory``, offline (made after the instrumentor when both are requested)."""
    from mem0 import Memory
    from mem0_app import config

    instance = Memory.from_config(config(llm_server.base_url, str(tmp_path)))  # type: ignore[attr-defined]
    yield instance
    close = getattr(instance, "close", None)
    if callable(close):
        close()
