"""Installable like any package (issue 26, item 5): the wheel and the sdist build (``python -m build``)
and pass ``twine check``; the wheel, installed in a fresh venv with no extra, runs the offline example,
``memtrace --help`` and ``memtrace inspect``; what needs an extra says which in one line, no traceback.

The build runs on a copy of the checkout (nothing is written into it) with build isolation, as a user's
``python -m build`` does; the fresh venv gets the wheel's dependencies from the package index. Without
``build`` or ``twine`` (the ``[test]`` extra) the test skips, saying so; on CI (``CI=true``) it fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from memtrace_otel.extras import wheel_name

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
_NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache",
                                     ".ruff_cache", ".hypothesis", ".mypy_cache")
_NOT_COPIED_AT_TOP = {"build", "dist", "spans"}  # what a developer's runs leave in the checkout


def _ignore(directory: str, names: list[str]) -> set[str]:
    ignored = set(_NOT_COPIED(directory, names))
    return ignored | (_NOT_COPIED_AT_TOP & set(names)) if Path(directory) == ROOT else ignored


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        reason = f"{module} is not installed: pip install -e '.[test]'"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI must build and check the package", pytrace=False)
        pytest.skip(reason)


def _run(command: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # A clean environment for the installed package: nothing of this checkout on the path.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``dist/`` with the sdist and the wheel, built from a copy of the checkout."""
    _require("build")
    _require("twine")
    work = tmp_path_factory.mktemp("package")
    source = work / "src"
    shutil.copytree(ROOT, source, ignore=_ignore)
    dist = work / "dist"
    result = _run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)], work, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return dist


def test_wheel_and_sdist_build_and_pass_twine_check(built: Path) -> None:
    wheels, sdists = sorted(built.glob("*.whl")), sorted(built.glob("*.tar.gz"))
    assert [w.name for w in wheels] == [wheel_name()] and len(sdists) == 1
    result = _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)], built)
    assert result.returncode == 0, result.stdout + result.stderr
    names = zipfile.ZipFile(wheels[0]).namelist()
    # collector/ and exporters/ are installed as memtrace_otel.collector and memtrace_otel.exporters
    for member in ("memtrace_otel/py.typed", "memtrace_otel/collector/attribution_service.py",
                   "memtrace_otel/exporters/otlp_json_file.py", "memtrace_otel/signals.py"):
        assert member in names, member
    assert not [n for n in names if n.startswith(("tests/", "memtrace_bench/", "benchmarks/", "examples/"))]


def test_the_wheel_installs_in_a_fresh_venv_and_runs_the_example(built: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, memtrace = venv / "bin" / "python", venv / "bin" / "memtrace"
    installed = _run([str(python), "-m", "pip", "install", "-q", str(built / wheel_name())], tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    # The examples run from a directory of their own: they import the installed package, not the checkout.
    here = tmp_path / "app"
    here.mkdir()
    for example in ("offline_memory_agent.py", "jaeger_writeback.py", "mem0_agent.py"):
        shutil.copy(ROOT / "examples" / example, here)

    agent = _run([str(python), "offline_memory_agent.py", "--out", "spans"], here)
    assert agent.returncode == 0, agent.stderr
    assert "spans written to" in agent.stdout and (here / "spans" / "offline-memory-agent.jsonl").is_file()
    helped = _run([str(memtrace), "--help"], here)
    assert helped.returncode == 0 and "analyze" in helped.stdout, helped.stderr
    inspected = _run([str(memtrace), "inspect", "spans"], here)
    assert inspected.returncode == 0 and "evaluations" in inspected.stdout, inspected.stderr
    analyzed = _run([str(memtrace), "analyze", "spans", "--json"], here)
    assert analyzed.returncode == 0 and '"failures"' in analyzed.stdout, analyzed.stderr

    # What needs an extra says which, in one line, and how to install it from a checkout or the wheel.
    for command, extra in (([str(python), "jaeger_writeback.py"], "serve"),
                           ([str(python), "mem0_agent.py", "--out", "m"], "mem0"),
                           ([str(memtrace), "serve"], "serve"),
                           ([str(memtrace), "analyze", "spans", "--engine", "llm-agent"], "openai"),
                           ([str(memtrace), "annotate", "--service", "app", "--jaeger", "http://127.0.0.1:9",
                             "--backend-otlp", "http://127.0.0.1:9"], "serve")):
        result = _run(command, here)
        said = (result.stdout + result.stderr).strip()
        assert result.returncode != 0 and "Traceback" not in said, (command, said)
        assert len(said.splitlines()) == 1 and f"[{extra}]" in said and wheel_name() in said, (command, said)
