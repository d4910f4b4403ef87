"""benchmarks/performance/remeasure.py: the driver that re-runs docs/performance.md's claims.

Its benchmarks take minutes each, so these run none of them: they check the driver's own promises (every
section listed with its commands, a bad ``--only`` as one line, a failing benchmark recorded and reported in
one line while the next one still runs, each result written with its commit, times and load average)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

PERFORMANCE = Path(__file__).resolve().parents[1] / "benchmarks" / "performance"
sys.path.insert(0, str(PERFORMANCE))
import remeasure  # noqa: E402  (beside the benchmarks, not a package)


def _driver(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PERFORMANCE / "remeasure.py"), *args], capture_output=True,
                          text=True, timeout=60)


def test_list_names_every_section_and_command_with_an_existing_script() -> None:
    done = _driver("--list")
    assert done.returncode == 0, done.stderr
    options = argparse.Namespace(data="/tmp/d", bench="/tmp/b")
    for section in remeasure.SECTIONS:
        assert f"{section.name}: " in done.stdout
        for command in section.commands(options):
            assert f"{section.name}/{command.label}: {command.script}" in done.stdout
            assert (PERFORMANCE / command.script).is_file(), command.script


def test_only_one_command_of_a_section() -> None:
    done = _driver("--list", "--only", "mem0/compare-2.2.1")
    assert done.returncode == 0, done.stderr
    assert "mem0/compare-2.2.1:" in done.stdout
    assert "mem0/compare-1.0.11:" not in done.stdout
    assert "op-clock" not in done.stdout


@pytest.mark.parametrize("args", [["--list", "--only", "nope"], ["--list", "--only", "graph/nope"], []])
def test_bad_arguments_are_one_line(args: list[str]) -> None:
    done = _driver(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("remeasure.py: error: ")


def test_a_failing_benchmark_is_reported_and_the_next_one_runs(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    options = argparse.Namespace(out=str(tmp_path), nice=None, timeout=60.0)
    section = remeasure.Section("demo", "a demonstration", lambda o: [])
    broken = remeasure.Command("broken", "no_such_benchmark.py", ())
    working = remeasure.Command("list", "remeasure.py", ("--list", "--only", "op-clock"))
    assert remeasure.run_one(section, broken, 1, options) is False
    assert remeasure.run_one(section, working, 1, options) is True
    lines = capsys.readouterr().err.strip().splitlines()
    failed = [line for line in lines if "FAILED" in line]
    assert len(failed) == 1 and failed[0].startswith("remeasure: demo/broken run 1 FAILED (exit 2): ")
    assert any(line.startswith("remeasure: demo/list run 1 done in ") for line in lines)
    broken_record = json.loads((tmp_path / "demo.broken.run1.json").read_text())
    assert broken_record["returncode"] == 2
    record = json.loads((tmp_path / "demo.list.run1.json").read_text())
    assert record["returncode"] == 0
    assert "op-clock/interleaved: op_clock.py --layout interleaved --json" in record["output"]
    for key in ("commit", "start", "end", "loadavg_before", "loadavg_after", "argv"):
        assert record[key], key
    assert record["start"] <= record["end"]


def test_json_output_is_parsed_after_progress_lines() -> None:
    assert remeasure._output('progress\n{"a": 1}\n') == {"a": 1}
    assert remeasure._output('[1, 2]') == [1, 2]
    assert remeasure._output("plain text") == "plain text"


@pytest.mark.parametrize(("enabled", "grouped"), [("1", True), ("0", False)])
def test_the_nice_reaches_the_sessions_autogroup_only_when_the_kernel_groups_by_session(
        tmp_path: Path, enabled: str, grouped: bool) -> None:
    """A fake /proc: with autogroup on, the session's group gets the nice value (else nice orders nothing
    across sessions); with it off, the group is left alone."""
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "sched_autogroup_enabled").write_text(enabled + "\n")
    (tmp_path / "self").mkdir()
    group = tmp_path / "self" / "autogroup"
    group.write_text("/autogroup-7 nice 0\n")
    written = remeasure.autogroup_nice(-10, proc=tmp_path)
    # A real /proc file then reads "/autogroup-N nice -10"; the fake one holds what was written.
    assert written == ("-10" if grouped else None)
    assert group.read_text() == ("-10\n" if grouped else "/autogroup-7 nice 0\n")


def test_a_refused_autogroup_write_is_one_line_not_a_traceback(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "sched_autogroup_enabled").write_text("1\n")
    assert remeasure.autogroup_nice(-10, proc=tmp_path) is None  # no self/autogroup to write
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "could not set the session's autogroup nice to -10" in err
