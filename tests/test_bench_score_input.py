"""``memtrace bench score`` treats labels.jsonl as input (issue 24, item 10).

A label names span files: only files inside the benchmark directory are opened (an absolute
path, ``..`` or a symlink out is refused). A malformed row is one problem line and the other
rows are scored; no traceback.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_bench import _hand_made_bench, _labels

from memtrace_bench.score import score_cases
from memtrace_otel.cli import main


def _write(directory: Path, rows: list[object]) -> None:
    (directory / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    directory = tmp_path / "bench"
    directory.mkdir()
    _hand_made_bench(directory)
    return directory


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink"])
def test_span_files_outside_the_benchmark_directory_are_not_opened(bench: Path, where: str) -> None:
    outside = bench.parent / "outside.jsonl.gz"
    shutil.copy(bench / "spans.jsonl.gz", outside)  # readable spans: opened, they would be scored
    if where == "symlink":
        (bench / "link.jsonl.gz").symlink_to(outside)
    named = {"absolute": str(outside), "dotdot": "../outside.jsonl.gz", "symlink": "link.jsonl.gz"}[where]
    good, bad = _labels(bench)
    bad["spans"] = [named]
    _write(bench, [good, bad])
    results, problems = score_cases(str(bench), "last-operation")
    assert [r.case_id for r in results] == [good["case_id"]]
    assert problems == [f"{bench / 'labels.jsonl'}:2: span file {named!r} is outside the benchmark "
                        "directory; skipped"]


@pytest.mark.parametrize(("row", "problem"), [
    (5, "is int, not an object"),
    (["case_id"], "is list, not an object"),
    ({"case_id": 1}, "case_id is int, not a string"),
    ({"error_type": None}, "error_type is NoneType, not a string"),
    ({"operation": "op:1"}, "operation is str, not an object"),
    ({"spans": 7}, "spans is not a list of span file paths"),
    ({"spans": []}, "spans is not a list of span file paths"),
    ({"spans": ["spans.jsonl.gz", None]}, "spans is not a list of span file paths"),
])
def test_a_malformed_label_row_is_one_line_and_the_rest_is_scored(bench: Path, row: object,
                                                                  problem: str) -> None:
    good, other = _labels(bench)
    bad = {**other, **row} if isinstance(row, dict) else row
    _write(bench, [good, bad])
    result = CliRunner().invoke(main, ["bench", "score", "--engine", "last-operation", str(bench), "--json"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    summary = json.loads(result.stdout)
    assert [c["case_id"] for c in summary["cases"]] == [good["case_id"]]
    assert f"labels.jsonl:2: {problem}; skipped" in result.stderr


def test_gold_stated_splits_the_scores_and_only_a_bool_counts(bench: Path) -> None:
    """A real-mem0 label's ``gold_stated`` splits the summary; a value that is not a bool says nothing."""
    good, other = _labels(bench)
    _write(bench, [{**good, "gold_stated": True}, {**other, "gold_stated": "yes"}])
    result = CliRunner().invoke(main, ["bench", "score", "--engine", "last-operation", str(bench), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert [c["gold_stated"] for c in summary["cases"]] == [True, None]
    assert list(summary["by_gold_stated"]) == ["stated"]
    assert summary["by_gold_stated"]["stated"]["cases"] == 1
