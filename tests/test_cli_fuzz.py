"""Property: no attribute value, of any type, crashes ``inspect``, ``graph`` or ``analyze``.

A valid span file (tests/scenario.py through the real SDK and the project's
exporter) has the types and values of some of its spans' attributes replaced at
random: ``intValue`` where a string was, strings where arrays were, non-ASCII
digits and 5,000-digit numbers in versions and sizes, wrong booleans, broken
variable ids and descriptors, nesting hundreds deep. Whatever is done, the CLI
prints no traceback, exits 0 or 3, and still reads every span left untouched.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.cli import main
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

from scenario import run_pipeline

NUMBERS = ["²", "٣", "１２", "9" * 5000, "-1", "0", "1e3", " 7", "", "0x10", "७"]
IDS = ["x", "y@notanint", "@1", "a@²", "a@" + "9" * 5000, "a@-1", "mem:D1:1@1", "answer:q1@1", "@", "a@@1"]
DESCRIPTORS = ["memory_unit ² abcd mem:D1:1@1", f"message {'9' * 5000} 08e7 msg:D1:1@1", "a b c", "",
               "memory_unit 12 zz", "memory_unit -5 abcd mem:x@1", "other 1 ab x@٣"]
HOSTILE_STRINGS = st.one_of(st.sampled_from(NUMBERS + IDS + DESCRIPTORS),
                            st.text(max_size=12), st.sampled_from(["\x1b[2J", "\ud800", "true", "false"]))

SCALARS = st.one_of(
    st.builds(lambda s: {"stringValue": s}, HOSTILE_STRINGS),
    st.builds(lambda v: {"intValue": v}, st.one_of(
        st.integers(), st.sampled_from(NUMBERS), st.floats(), st.booleans(), st.none())),
    st.builds(lambda v: {"doubleValue": v}, st.one_of(
        st.floats(), st.sampled_from(["NaN", "Infinity", "-Infinity", "x", "1"]), st.integers())),
    st.builds(lambda v: {"boolValue": v}, st.one_of(
        st.booleans(), st.sampled_from(["false", "true", "0", ""]), st.integers(-1, 2))),
    st.builds(lambda v: {"bytesValue": v}, st.text(max_size=8)),
    st.sampled_from([{}, None, 5, "x", [], {"unknownValue": 1}, {"stringValue": None}, {"stringValue": 5},
                     {"stringValue": "a", "intValue": "1"}, {"arrayValue": 5}, {"arrayValue": {"values": 5}},
                     {"arrayValue": None}, {"kvlistValue": "x"}]),
)
VALUES = st.recursive(SCALARS, lambda children: st.one_of(
    st.builds(lambda vs: {"arrayValue": {"values": vs}}, st.lists(children, max_size=4)),
    st.builds(lambda kvs: {"kvlistValue": {"values": kvs}},
              st.lists(st.builds(lambda k, v: {"key": k, "value": v}, st.text(max_size=5), children),
                       max_size=3)),
), max_leaves=8)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "deep"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


ANY_VALUE = st.one_of(VALUES, st.integers(100, 600).map(nested))


@functools.cache
def base_lines() -> tuple[str, ...]:
    """One span per line: the scenario through SimpleSpanProcessor and the project's exporter."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "spans.jsonl"
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
        run_pipeline(provider)
        provider.shutdown()
        return tuple(line for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def span_of(document: dict[str, Any]) -> dict[str, Any]:
    return document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]


def all_keys() -> list[str]:
    keys = {a["key"] for line in base_lines() for a in span_of(json.loads(line)).get("attributes", [])}
    return sorted(keys)


@st.composite
def mutation(draw: st.DrawFn, span: dict[str, Any]) -> None:
    """Change one attribute of ``span`` in place: its value, one array element, or a new key."""
    attributes = span.setdefault("attributes", [])
    action = draw(st.sampled_from(["value", "string", "element", "add", "attributes"]))
    if action == "attributes" or not isinstance(attributes, list):
        span["attributes"] = draw(st.sampled_from([5, "x", None, {"k": 1}, [5, None, {"key": 1}]]))
    elif action == "add" or not attributes:
        attributes.append({"key": draw(st.sampled_from(all_keys())), "value": draw(ANY_VALUE)})
    else:
        attribute = draw(st.sampled_from(attributes))
        value = attribute.get("value") if isinstance(attribute, dict) else None
        array = value.get("arrayValue") if isinstance(value, dict) else None
        values = array.get("values") if isinstance(array, dict) else None
        if not isinstance(attribute, dict):
            return
        if action == "element" and isinstance(values, list) and values:
            values[draw(st.integers(0, len(values) - 1))] = draw(ANY_VALUE)
        elif action == "string":
            attribute["value"] = {"stringValue": draw(HOSTILE_STRINGS)}
        else:
            attribute["value"] = draw(ANY_VALUE)


@st.composite
def mutated_spans(draw: st.DrawFn) -> dict[int, str]:
    """1-3 spans of the base file (by line number), each with 1-3 attributes changed."""
    chosen = draw(st.sets(st.integers(0, len(base_lines()) - 1), min_size=1, max_size=3))
    mutated = {}
    for index in sorted(chosen):
        document = json.loads(base_lines()[index])
        for _ in range(draw(st.integers(1, 3))):
            draw(mutation(span_of(document)))
        mutated[index] = json.dumps(document)
    return mutated


def check(outcome: Result, what: str) -> None:
    crashed = outcome.exception is not None and not isinstance(outcome.exception, SystemExit)
    assert not crashed, f"{what} raised {outcome.exception!r}\n{outcome.stderr[-2000:]}"
    assert outcome.exit_code in (0, 3), f"{what} exited {outcome.exit_code}: {outcome.output[-2000:]}"
    assert "Traceback" not in outcome.output


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def test_the_base_file_is_clean(workdir: Path) -> None:
    path = workdir / "base.jsonl"
    path.write_text("\n".join(base_lines()) + "\n", encoding="utf-8")
    outcome = CliRunner().invoke(main, ["analyze", "--json", str(path)])
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.stdout)["failures"], "the scenario has a failure for analyze to explain"


@settings(max_examples=int(os.environ.get("MEMTRACE_FUZZ_EXAMPLES", "250")), deadline=None, database=None,
          derandomize=os.environ.get("CI") == "true",
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(mutated=mutated_spans())
def test_no_attribute_value_crashes_the_cli(workdir: Path, mutated: dict[int, str]) -> None:
    lines = [mutated.get(index, line) for index, line in enumerate(base_lines())]
    untouched = len(lines) - len(mutated)
    path = workdir / "mutated.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    runner = CliRunner()
    inspect = runner.invoke(main, ["inspect", "--json", str(path)])
    check(inspect, "inspect --json")
    assert json.loads(inspect.stdout)["spans"] >= untouched, inspect.stderr
    check(runner.invoke(main, ["inspect", str(path)]), "inspect")
    check(runner.invoke(main, ["graph", str(path)]), "graph")
    analyze = runner.invoke(main, ["analyze", "--json", str(path)])
    check(analyze, "analyze --json")
    json.loads(analyze.stdout)
    check(runner.invoke(main, ["analyze", str(path)]), "analyze")
