"""`memtrace` subcommands other distributions contribute (the `memtrace.cli` entry-point group): the
benchmark's `memtrace bench`, what `memtrace bench` says when the benchmark is not installed, and the
runtime never importing the benchmark."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import memtrace_otel.cli as cli
from memtrace_otel.cli import PLUGIN_GROUP, main

ROOT = Path(__file__).resolve().parent.parent


@click.command("hello")
def hello_command() -> None:
    """Say hello (a plugin's command)."""
    click.echo("hello from a plugin")


def _only(monkeypatch: pytest.MonkeyPatch, *points: EntryPoint) -> None:
    """The installed entry points of the group are ``points`` and nothing else."""
    def entry_points(*, group: str) -> list[EntryPoint]:
        assert group == PLUGIN_GROUP
        return list(points)

    monkeypatch.setattr(cli, "entry_points", entry_points)


def test_the_benchmark_contributes_bench_through_the_entry_point() -> None:
    from memtrace_bench.cli import bench_group

    assert cli._LazyGroup._load("bench") is bench_group
    listed = CliRunner().invoke(main, ["--help"])
    assert listed.exit_code == 0 and "bench" in listed.stdout
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0
    for command in ("build", "score", "repair", "report", "mem0", "membase"):
        assert f"  {command} " in result.stdout


def test_bench_without_the_benchmark_is_one_line_saying_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _only(monkeypatch)
    result = CliRunner().invoke(main, ["bench", "build", "--quick", "--out", str(tmp_path / "b")])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "memtrace bench: the benchmark is a separate package: pip install -e ./benchmarks "
        "(in a memtrace-otel checkout)"]
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "b").exists()
    listed = CliRunner().invoke(main, ["--help"])
    assert "(not installed: the benchmark" in listed.stdout


def test_a_plugin_from_another_distribution_is_listed_and_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(monkeypatch, EntryPoint("hello", f"{__name__}:hello_command", PLUGIN_GROUP))
    assert "hello" in CliRunner().invoke(main, ["--help"]).stdout
    result = CliRunner().invoke(main, ["hello"])
    assert result.exit_code == 0 and result.stdout == "hello from a plugin\n"


def test_a_plugin_cannot_replace_a_built_in_command(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(monkeypatch, EntryPoint("report", f"{__name__}:hello_command", PLUGIN_GROUP))
    result = CliRunner().invoke(main, ["report", "--help"])
    assert result.exit_code == 0 and "failed answer" in result.stdout


def test_a_plugin_that_cannot_be_imported_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(monkeypatch, EntryPoint("bench", "no_such_module_anywhere:group", PLUGIN_GROUP))
    result = CliRunner().invoke(main, ["bench", "score", "x"])
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert "no_such_module_anywhere:group cannot be imported" in result.stderr


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("folder", ["memtrace_otel", "collector", "exporters"])
def test_the_runtime_never_imports_the_benchmark(folder: str) -> None:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files
    offenders = [str(p.relative_to(ROOT)) for p in files
                 if any(m == "memtrace_bench" or m.startswith("memtrace_bench.") for m in _imports(p))]
    assert offenders == []


def test_other_commands_do_not_load_the_benchmark() -> None:
    code = ("import sys\nfrom memtrace_otel.cli import main\n"
            "try:\n    main(['inspect', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('memtrace_bench' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "False"
