"""The mem0 instrumentor against both mem0ai generations, each in its own virtualenv.

mem0ai 1.x and 2.x cannot share an environment (nor belong in the project's), so
``.ci/install-mem0-venvs.sh`` builds one venv per supported end of the range and
this test runs ``tests/mem0`` inside each as a subprocess pytest, failing with its
output. A venv that is absent skips with the reason (locally; CI installs them).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from process_harness import MEM0_VENVS, pytest_in_venv

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("1.0.11", "2.2.1")  # .ci/install-mem0-venvs.sh builds exactly these


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_mem0_generation(version: str) -> None:
    python = MEM0_VENVS / f"mem0ai-{version}" / "bin" / "python"
    summary = pytest_in_venv(python, ROOT / "tests" / "mem0", f"tests/mem0 under mem0ai {version}",
                             f"no mem0ai {version} venv at {python.parent.parent} "
                             "(bash .ci/install-mem0-venvs.sh)")
    print(f"mem0ai {version}: {summary}", file=sys.stderr)
