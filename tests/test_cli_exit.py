"""``memtrace graph``, ``report`` and ``analyze`` run as the command end without tearing their heap down.

Started with the process's own arguments, they flush their output and end with ``os._exit``
(``cli.common.end_command``) instead of freeing a large graph object by object. What they write,
print and exit with must be what the same command gives in process (click's runner), where it
raises ``SystemExit`` as before and the caller's process lives on.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_cli_determinism import write_cyclic

from memtrace_otel import cli
from memtrace_otel.cli import main


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Failed answers (a report has something to draw) and version cycles (problems on stderr, exit 3).
    return write_cyclic(tmp_path_factory.mktemp("exit") / "spans.jsonl")


def _as_command(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "memtrace_otel", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_graph_as_the_command_writes_all_of_it_and_exits_as_in_process(spans: Path) -> None:
    in_process = CliRunner().invoke(main, ["graph", str(spans)])
    assert not cli.from_command_line()  # a runner passes its arguments: SystemExit, not os._exit
    run = _as_command("graph", str(spans))
    assert in_process.exit_code == run.returncode == 3, run.stderr  # the cycles were input problems
    assert run.stdout.endswith("]}\n")  # flushed to the end before the process ended
    assert json.loads(run.stdout) == json.loads(in_process.stdout)
    problems = [line for line in run.stderr.splitlines() if line.startswith("memtrace: ")]
    assert problems and problems == [line for line in in_process.stderr.splitlines()
                                     if line.startswith("memtrace: ")]


def test_report_as_the_command_writes_the_same_page_and_exits_as_in_process(spans: Path,
                                                                            tmp_path: Path) -> None:
    page_in_process, page_command = tmp_path / "in.html", tmp_path / "command.html"
    frozen = gc.get_freeze_count()
    in_process = CliRunner().invoke(main, ["report", str(spans), "--out", str(page_in_process)])
    # As the command it freezes its graph for the collector (the process ends without freeing it);
    # in process it leaves the caller's collector as it was.
    assert gc.get_freeze_count() == frozen and gc.isenabled()
    run = _as_command("report", str(spans), "--out", str(page_command))
    assert in_process.exit_code == run.returncode == 3, run.stderr
    assert "failed answer(s)" in run.stderr.splitlines()[-1]  # said before the exit
    assert page_command.read_bytes() == page_in_process.read_bytes()
    assert not list(tmp_path.glob("*.tmp*"))


def test_analyze_as_the_command_writes_the_same_results_and_exits_as_in_process(spans: Path) -> None:
    frozen = gc.get_freeze_count()
    in_process = CliRunner().invoke(main, ["analyze", str(spans), "--json"])
    # As the command it freezes its graph for the collector; in process the caller's is left alone.
    assert gc.get_freeze_count() == frozen and gc.isenabled()
    run = _as_command("analyze", str(spans), "--json")
    assert in_process.exit_code == run.returncode == 3, run.stderr  # the cycles were input problems
    assert run.stdout.endswith("}\n")  # flushed to the end before the process ended
    results, results_in_process = json.loads(run.stdout), json.loads(in_process.stdout)
    for failure in results["failures"] + results_in_process["failures"]:
        del failure["seconds"]  # the attribution's own time, the one field that differs run to run
    assert results["failures"] and results == results_in_process
    # The same without --json: the table (or its narrow form) and the summaries, all of them written.
    table_in_process = CliRunner().invoke(main, ["analyze", str(spans)])
    table = _as_command("analyze", str(spans))
    assert table.returncode == table_in_process.exit_code == 3
    assert table.stdout == table_in_process.stdout and "Error types" in table.stdout


def test_graph_output_to_a_file_is_complete(spans: Path, tmp_path: Path) -> None:
    out = tmp_path / "graph.json"
    run = _as_command("graph", str(spans), "-o", str(out))
    assert run.returncode == 3 and run.stdout == ""
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {n["id"] for n in data["nodes"] if n.get("type") == "operation"}
