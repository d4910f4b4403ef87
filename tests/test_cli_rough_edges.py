"""Rough edges a new user met (issue 26, item 5): ``analyze`` at 80 columns splits no word, and with the
trace backend down ``analyze --store-lookback`` says so in one line (not "0 more trace(s)" first)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memtrace_otel.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("agent") / "spans"
    subprocess.run([sys.executable, str(ROOT / "examples" / "offline_memory_agent.py"), "--out", str(out)],
                   check=True, capture_output=True)
    return out


def test_analyze_at_80_columns_splits_no_word(spans: Path) -> None:
    wide = CliRunner().invoke(main, ["analyze", str(spans)], terminal_width=200)
    narrow = CliRunner().invoke(main, ["analyze", str(spans)], terminal_width=80)
    assert wide.exit_code == narrow.exit_code == 0, narrow.output
    trace_ids = set(re.findall(r"\b[0-9a-f]{32}\b", wide.stdout))
    error_types = set(re.findall(r"\b[A-Z][a-z]+Error\b", wide.stdout))
    assert trace_ids and error_types
    # Every trace id and error type the wide table shows is whole at 80 columns too, each failure
    # on lines of its own, none wider than the terminal.
    assert set(re.findall(r"\b[0-9a-f]{32}\b", narrow.stdout)) == trace_ids
    assert set(re.findall(r"\b[A-Z][a-z]+Error\b", narrow.stdout)) == error_types
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    for fragment in ("Extractio\n", "predictio\n", "Retrieval\n"):
        assert fragment not in narrow.stdout


def test_a_store_search_with_the_backend_down_is_one_clear_line(spans: Path) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    result = CliRunner().invoke(main, ["analyze", str(spans), "--jaeger", url, "--store-lookback", "3600"])
    assert result.exit_code == 3  # the command ran; its input is incomplete
    lines = result.stderr.strip().splitlines()
    assert lines == [f"memtrace: {url}: could not search 1 memory store(s) for the traces that used them: "
                     f"{lines[0].rpartition('used them: ')[2]}"]
    assert "cannot connect" in lines[0] and "0 more trace" not in result.stderr
