"""What the CLI prints for people is safe: span content is shown, never obeyed by the terminal.

Span names, questions, answers, gold answers, attribute keys and file names
carry terminal escape sequences (ESC [2J clears the screen, ESC ]0;...BEL sets
the window title), C1 controls, bidi overrides and rich markup; none of them
may reach stdout or stderr raw, in tables, summaries or problem lines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.cli import main
from memtrace_otel.cli.terminal import cell, number, safe_markup, safe_text
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;pwned\x07"
C1_CSI = "\x9b31m"
BIDI = "\u202e"
NASTY = f"{CLEAR}{TITLE}{C1_CSI}{BIDI}\x00\x08\r\x7f:smile:[bold]"
# Every C0 control but the newline that separates lines, DEL, C1, and the bidi controls.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def hostile_spans(path: Path) -> None:
    """A memory that forgets a fact, then a failed answer; every text carries control sequences."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    mt = MemoryTracer(provider, capture_content=True)
    app = provider.get_tracer("hostile")
    with app.start_as_current_span("ingest"), mt.operation(f"extract{NASTY}", Category.EXTRACTION) as op:
        message = op.read(f"msg:D1{NASTY}", content=f"I live in Lisbon{NASTY}", kind=VariableKind.MESSAGE)
        unit = op.write(f"mem:1{NASTY}", f"User lives in Porto{NASTY}", kind=VariableKind.MEMORY_UNIT)
        del message
    with app.start_as_current_span("question"):
        with mt.operation(f"search{NASTY}", Category.RETRIEVAL) as op:
            op.read(unit)
            context = op.write(f"context:q1{NASTY}", f"User lives in Porto{NASTY}", kind=VariableKind.CONTEXT)
        with mt.operation(f"answer{NASTY}", Category.GENERATION) as op:
            op.read(context)
            answer = op.write(f"answer:q1{NASTY}", f"Porto{NASTY}", kind=VariableKind.ANSWER)
        with mt.operation(f"judge{NASTY}", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, score=0.0, question=f"Where does the user live?{NASTY}",
                                 prediction=f"Porto{NASTY}", gold=f"Lisbon{NASTY}", evidence=[f"D1{NASTY}"],
                                 answer=answer, case_id=f"q1{NASTY}")
    provider.shutdown()


def bad_line_named(directory: Path) -> Path:
    """A file whose name and whose one bad line both carry control sequences."""
    path = directory / f"bad{CLEAR}{BIDI}.jsonl"
    path.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + "ab" * 16
                    + '", "spanId": "' + "cd" * 8 + '", "name": "x", "attributes": [{"key": "k\\u001b[2J", '
                    '"value": {"kvlistValue": 5}}]}]}]}]}\n{not json ' + CLEAR + "\n", encoding="utf-8")
    return path


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    directory = tmp_path / "spans"
    directory.mkdir()
    hostile_spans(directory / "hostile.jsonl")
    bad_line_named(directory)
    return directory


def strings(data: object) -> list[str]:
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for key, value in data.items() for s in (*strings(key), *strings(value))]
    if isinstance(data, list):
        return [s for value in data for s in strings(value)]
    return []


def assert_safe(text: str, what: str) -> None:
    found = UNSAFE.search(text)
    context = text[max(0, found.start() - 40):found.end() + 40] if found else ""
    assert found is None, f"{what} holds {found.group()!r} at {found.start()}: {context!r}"


@pytest.mark.parametrize("command", [["inspect"], ["analyze"], ["graph"], ["graph", "--format", "dot"],
                                     ["graph", "--format", "graphml"], ["inspect", "--json"],
                                     ["analyze", "--json"]])
def test_no_control_character_reaches_the_terminal(hostile: Path, command: list[str]) -> None:
    outcome = CliRunner().invoke(main, [*command, str(hostile)], terminal_width=200)
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.exception
    assert outcome.exit_code == 3, outcome.output  # the bad file's problems
    assert_safe(outcome.stderr, "stderr")
    assert "memtrace: " in outcome.stderr and "\\x1b[2J" in outcome.stderr  # shown, made visible
    if command[0] != "graph":  # graph's DOT and GraphML are data files, escaped by graph/export.py
        assert_safe(outcome.stdout, "stdout")
    if "--json" in command or command == ["graph"]:
        data = json.loads(outcome.stdout)  # valid JSON, the content kept whole
        assert any(NASTY in text for text in strings(data))


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as wide as the content, so that no cell is folded in the middle of a word."""
    from memtrace_otel.cli import common

    monkeypatch.setattr(common.stdout, "_width", 400)


@pytest.mark.usefixtures("wide")
def test_tables_show_the_content_with_its_controls_visible(hostile: Path) -> None:
    inspect = CliRunner().invoke(main, ["inspect", str(hostile)], terminal_width=250).stdout
    assert "live?\\x1b[2J\\x1b]0;pwned\\x07" in inspect and "\\u202e" in inspect
    assert ":smile:" in inspect and "[bold]" in inspect  # neither an emoji nor markup
    analyze = CliRunner().invoke(main, ["analyze", str(hostile)], terminal_width=250).stdout
    assert "\\x9b31m" in analyze and "Lisbon" in analyze


def test_error_messages_are_safe_too(hostile: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    trace = runner.invoke(main, ["graph", "--trace", f"ff{CLEAR}", str(hostile)])
    assert trace.exit_code == 1 and "\\x1b[2J" in trace.stderr
    assert_safe(trace.stderr, "stderr")
    missing = runner.invoke(main, ["inspect", str(tmp_path / f"nope{TITLE}.jsonl")])
    assert missing.exit_code == 1 and "no such file" in missing.stderr
    assert_safe(missing.stderr, "stderr")


def test_helpers() -> None:
    assert safe_text(f"a{CLEAR}b") == "a\\x1b[2Jb"
    assert safe_text("\ud800") == "\\ud800"  # a lone surrogate would make the write itself fail
    assert safe_markup("[red]x[/red]") == "\\[red]x\\[/red]"
    assert cell(None) == "[dim]-[/dim]" and cell("a\n\tb") == "a b"
    assert number("0.5") == "0.5" and number(0.25) == "0.25" and number(True) == "True"
    assert number(10**5000).endswith("-bit integer>") and number(float("inf")) == "inf"
    assert number(["x", 1]) == "['x', 1]"


def test_score_of_any_type_does_not_crash_the_table(tmp_path: Path) -> None:
    # memtrace.evaluation.score written as a string, a list and a huge number: the table shows
    # whatever the graph kept and never formats a string as a float.
    lines = []
    for i, score in enumerate([{"stringValue": "high"}, {"arrayValue": {"values": [{"intValue": "1"}]}},
                               {"intValue": "9" * 300}, {"doubleValue": 0.5}]):
        attributes = [
            {"key": "memtrace.operation.category", "value": {"stringValue": "evaluation"}},
            {"key": "memtrace.evaluation.passed", "value": {"boolValue": False}},
            {"key": "memtrace.evaluation.question", "value": {"stringValue": f"question {i}"}},
            {"key": "memtrace.evaluation.score", "value": score},
        ]
        span = {"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "judge",
                "attributes": attributes}
        lines.append(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    path = tmp_path / "scores.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for args in (["inspect"], ["inspect", "--json"], ["analyze"], ["analyze", "--json"]):
        outcome = CliRunner().invoke(main, [*args, str(path)], terminal_width=200)
        crashed = outcome.exception is not None and not isinstance(outcome.exception, SystemExit)
        assert not crashed, (args, outcome.exception)
        assert outcome.exit_code in (0, 3), (args, outcome.output)
        assert "question 3" in outcome.stdout or "--json" in args
    table = CliRunner().invoke(main, ["inspect", str(path)], terminal_width=200).stdout
    assert "0.50" in table
