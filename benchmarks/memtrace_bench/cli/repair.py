"""``memtrace bench repair``: counterfactual repair of one failed question of a built benchmark.

The clean run of the case's system and conversation is rebuilt from the
benchmark's manifest (same seed and settings: same spans), then each operation
that lost the question's critical information is repaired alone, in execution
order. With ``--engine``, the engine's verdict on the case (read from the
benchmark's span files) is checked against those repairs.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from memtrace_otel.cli.common import EXIT_PARTIAL, print_json, stderr, stdout
from memtrace_otel.llm_client import LLMError

__all__ = ["repair_command"]

_SETTINGS = ("seed", "max_sessions", "embedder", "locomo")


def _manifest(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, "manifest.json")
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        raise click.ClickException(f"{path}: no manifest (build one with `memtrace bench build`)") from None
    except json.JSONDecodeError as error:
        raise click.ClickException(f"{path}: not JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("settings"), dict):
        raise click.ClickException(f"{path}: no settings object in the manifest")
    return manifest


def _split_case(case_id: str) -> tuple[str, str]:
    parts = case_id.split("/")
    if len(parts) < 3 or not parts[2].startswith("q"):
        raise click.BadParameter(f"{case_id!r} is not a question case id (system/conversation/qN)",
                                 param_hint="CASE_ID")
    return parts[0], parts[1]


def _natural_row(directory: str, case_id: str) -> dict[str, Any] | None:
    path = os.path.join(directory, "natural_failures.jsonl")
    if not os.path.isfile(path):
        raise click.ClickException(f"{path}: no natural failures file")
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                stderr.print(f"memtrace: {escape(path)}:{number}: not JSON ({escape(error.msg)}); skipped")
                continue
            if isinstance(row, dict) and row.get("case_id") == case_id and isinstance(row.get("spans"), list):
                return row
    return None


def _engine_verdict(directory: str, case_id: str, engine_name: str) -> str | None:
    """The span the engine blames for the clean run's failed evaluation of ``case_id``."""
    from memtrace_bench.score import GraphCache, find_case_evaluation
    from memtrace_otel.attribution.base import FailureCase, create_engine

    row = _natural_row(directory, case_id)
    if row is None:
        raise click.ClickException(f"{case_id}: not a natural failure of {directory}")
    graph, _ = GraphCache(directory).get(row["spans"])
    evaluation = find_case_evaluation(graph, case_id)
    if evaluation is None:
        raise click.ClickException(f"{case_id}: no failed evaluation in its span files")
    return create_engine(engine_name).attribute(graph, FailureCase.from_graph(graph, evaluation)).span_id


@click.command("repair")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@click.argument("case_id")
@click.option("--engine", "engine_name", default=None,
              help="Check this engine's verdict against the repairs.")
@click.option("--json", "as_json", is_flag=True, help="Write the attempts as JSON on stdout.")
def repair_command(directory: str, case_id: str, engine_name: str | None, as_json: bool) -> None:
    """Repair each operation of a failed question alone; the earliest that restores the answer is its cause.

    CASE_ID is a question of the benchmark in DIRECTORY, e.g. ``rag/26/q12`` (a natural failure).
    Exit 3 when no single repair restores the answer.
    """
    from memtrace_bench.build import BuildConfig, replayable
    from memtrace_bench.repair import check_verdict, repair_question

    system, conversation = _split_case(case_id)
    settings = _manifest(directory)["settings"]
    blamed = _engine_verdict(directory, case_id, engine_name) if engine_name else None
    with tempfile.TemporaryDirectory(prefix="memtrace-repair-") as scratch:
        config = BuildConfig(out=scratch, **{k: settings[k] for k in _SETTINGS if k in settings})
        config.llm = settings.get("llm") is True  # built with --llm: replay through the same endpoint
        try:
            run, questions = replayable(config, system, conversation)
            if case_id not in questions:
                raise click.ClickException(f"{case_id}: no such question in {system}/{conversation}")
            outcome = repair_question(run, questions[case_id], case_id, exhaustive=True)
        except (FileNotFoundError, ValueError) as error:
            raise click.ClickException(str(error)) from None
        except LLMError as error:
            raise click.ClickException(f"{directory} was built with --llm: {error.reason}") from None
    report = {"case_id": case_id, "status": outcome.status, "critical_messages": outcome.keys,
              "attempts": [a.as_dict() for a in outcome.attempts],
              "earliest": outcome.earliest.as_dict() if outcome.earliest else None}
    if engine_name:
        report["engine"] = {"name": engine_name, "span_id": blamed, "verdict": check_verdict(outcome, blamed)}
    print_json(report) if as_json else _print(report)
    if not outcome.single_cause:
        raise SystemExit(EXIT_PARTIAL)


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"repairs of {escape(report['case_id'])}: {report['status']}")
    for column in ("target", "error type", "operation", "span", "restored", "prediction"):
        table.add_column(column)
    for a in report["attempts"]:
        table.add_row(escape(str(a["target"])), a["error_type"], escape(a["operation"].get("name", "")),
                      a["operation"].get("span_id", ""), "yes" if a["restored"] else "no",
                      escape(a["prediction"][:40]))
    stdout.print(table)
    if "engine" in report:
        engine = report["engine"]
        stdout.print(f"engine {escape(engine['name'])} blamed span {engine['span_id']}: {engine['verdict']}")
    if report["earliest"] is None:
        stderr.print("memtrace: no single repair restores the answer (not single-cause)")
