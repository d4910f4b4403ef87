"""``memtrace bench``: build the labelled failure benchmark, and score engines on it."""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

import click
from rich import box
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memtrace_bench.cli.repair import repair_command
from memtrace_bench.cli.report import report_command
from memtrace_otel.cli.common import EXIT_PARTIAL, print_json, stderr, stdout
from memtrace_otel.config import ENV_OPENAI_API_KEY, ENV_OPENAI_BASE_URL, ENV_OPENAI_MODEL
from memtrace_otel.extras import missing_extra
from memtrace_otel.llm_client import LLMClient, LLMError

__all__ = ["bench_group"]

# What `bench build` needs beyond a plain install: the reference systems' vector math and their
# offline embedding model (a build without it would silently use other embeddings, other labels).
_BENCH_EXTRA = ("numpy", "wordllama")
_ERROR_TYPES = ("ExtractionError", "UpdateError", "DeletionError", "RetrievalError", "ResponseError")
# Mirrors memtrace_bench.score.PARTS (not imported here: the CLI loads bench modules lazily).
_PARTS = ("injected", "natural", "multi", "distractor", "mem0-real-v1", "mem0-real-v2")
# Mirrors memtrace_bench.locomo.check_conversation_id, which this module must not import:
# it needs numpy and wordllama, and a bad argument should be reported without them.
_PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def _require_bench_extra() -> None:
    missing = [name for name in _BENCH_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise click.ClickException(f"`memtrace bench build` needs {' and '.join(missing)}: "
                                   "install the benchmark with its dependencies "
                                   "(pip install -e ./benchmarks)")


def _require_endpoint() -> None:
    """``--llm`` needs the openai package and an endpoint: say so before any work."""
    if importlib.util.find_spec("openai") is None:
        raise click.ClickException(missing_extra("`memtrace bench build --llm`", "openai"))
    if LLMClient().api_key is None:
        raise click.ClickException(f"`memtrace bench build --llm` needs an endpoint: set "
                                   f"{ENV_OPENAI_BASE_URL} (and {ENV_OPENAI_MODEL}) or {ENV_OPENAI_API_KEY}")


def _plain_ids(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if _PLAIN_ID.fullmatch(value) is None:
            raise click.BadParameter(f"{value!r} is not a plain conversation id "
                                     "(letters, digits, '-', '_', '.'; no path)")
    return values


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=stderr, transient=True)


@click.group("bench")
def bench_group() -> None:
    """Labelled failure cases on LoCoMo (fault injection), and engine scores on them."""


bench_group.add_command(repair_command)
bench_group.add_command(report_command)


@bench_group.command("build")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Benchmark directory.")
@click.option("--seed", default=0, show_default=True, help="Seed of every choice and span id.")
@click.option("--quick", is_flag=True, help="A tiny build (one conversation, 8 sessions) for tests.")
@click.option("--system", "systems", multiple=True, help="Only these systems (repeatable).")
@click.option("--conversation", "conversations", multiple=True, callback=_plain_ids,
              help="Only these LoCoMo ids, e.g. 26 (repeatable).")
@click.option("--per-conversation", type=click.IntRange(1), default=None,
              help="Cases kept per (system, conversation, error type) [default 5; quick 2].")
@click.option("--jobs", type=click.IntRange(1), default=None, help="Worker processes [default: cores].")
@click.option("--locomo", type=click.Path(file_okay=False), default=None,
              help="LoCoMo directory (default: MEMTRACE_LOCOMO_DIR or ../shared/data/locomo).")
@click.option("--llm", is_flag=True,
              help="Run the systems' LLM steps (answerer, judge, extractor, update decider) through the "
                   "OpenAI-compatible endpoint of MEMTRACE_OPENAI_BASE_URL / _MODEL / _API_KEY.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON on stdout.")
def build_command(out: str, seed: int, quick: bool, systems: tuple[str, ...], conversations: tuple[str, ...],
                  per_conversation: int | None, jobs: int | None, locomo: str | None, llm: bool,
                  as_json: bool) -> None:
    """Run the reference systems cleanly, inject one fault per case, write labels and spans."""
    _require_bench_extra()
    if llm:
        _require_endpoint()
    from memtrace_bench.build import BuildConfig, build, quick_config

    config = quick_config(out, seed) if quick else BuildConfig(out=out, seed=seed, jobs=os.cpu_count() or 1)
    if systems:
        config.systems = list(systems)
    if conversations:
        config.conversations = list(conversations)
    if per_conversation:
        config.per_conversation = per_conversation
    if jobs:
        config.jobs = jobs
    config.locomo = locomo
    config.llm = llm
    with _progress() as bar:
        task = bar.add_task("building", total=None)

        def advance(result: Any, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total,
                       description=f"{escape(result.system)}/{escape(result.conversation)}")

        try:
            manifest = build(config, progress=advance)
        except (FileNotFoundError, ValueError) as error:
            raise click.ClickException(str(error)) from None
        except LLMError as error:
            raise click.ClickException(f"--llm: {error.reason}") from None
    if as_json:
        print_json(manifest)
    else:
        _print_manifest(manifest, out)


def _print_manifest(manifest: dict[str, Any], out: str) -> None:
    table = Table(title=f"{manifest['labelled_cases']} labelled cases in {escape(out)} "
                        f"({manifest['seconds']} s)")
    types = _ERROR_TYPES
    table.add_column("system")
    for name in types:
        table.add_column(name.removesuffix("Error"), justify="right")
    table.add_column("clean acc. (cat 1-4)", justify="right")
    for system, applicable in manifest["applicable"].items():
        counts = manifest["cases"].get(system, {})
        cats = manifest["clean_accuracy"].get(system, {})
        passed = sum(c["passed"] for c in cats.values())
        total = sum(c["total"] for c in cats.values())
        table.add_row(escape(system), *[str(counts.get(t, 0)) if t in applicable else "n/a" for t in types],
                      f"{passed}/{total}")
    stdout.print(table)
    stdout.print(f"natural failures (unlabelled): {manifest['natural_failures']}")


@bench_group.command("mem0")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Benchmark directory.")
@click.option("--mem0-python", "mem0_python", default=None, type=click.Path(dir_okay=False),
              help="Python of a venv with mem0ai [default: the 1.0.11 venv of .ci/install-mem0-venvs.sh].")
@click.option("--conversation", "conversations", multiple=True, callback=_plain_ids,
              help="Only these LoCoMo ids (repeatable) [default: all].")
@click.option("--max-sessions", type=click.IntRange(1), default=None,
              help="Only the first N sessions of each.")
@click.option("--seed", default=0, show_default=True, help="Seed of every fault, record id and span id.")
@click.option("--jobs", type=click.IntRange(1), default=2, show_default=True, help="Replays run at once.")
@click.option("--top-k", type=click.IntRange(1), default=10, show_default=True,
              help="Memories per speaker's search (mem0's LoCoMo evaluation's default).")
@click.option("--locomo", type=click.Path(file_okay=False), default=None,
              help="LoCoMo directory [default: MEMTRACE_LOCOMO_DIR or ../shared/data/locomo].")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON on stdout.")
def mem0_command(out: str, mem0_python: str | None, conversations: tuple[str, ...], max_sessions: int | None,
                 seed: int, jobs: int, top_k: int, locomo: str | None, as_json: bool) -> None:
    """The real-mem0 part: mem0ai in its venv, a simulated LLM, failures labelled by replay."""
    from memtrace_bench.mem0_real.build import BuildOptions, DriverError, build, default_mem0_python

    python = mem0_python or default_mem0_python()
    if not os.path.isfile(python):
        raise click.ClickException(f"no mem0 venv python at {python} (bash .ci/install-mem0-venvs.sh, "
                                   "or --mem0-python PATH)")
    if not conversations:
        from memtrace_bench.locomo import conversation_ids

        try:
            conversations = tuple(conversation_ids(locomo))
        except FileNotFoundError as error:
            raise click.ClickException(str(error)) from None
    options = BuildOptions(out, python, list(conversations), seed, max_sessions, jobs, locomo, top_k=top_k,
                           progress=lambda line: stderr.print(escape(line)))
    try:
        manifest = build(options)
    except (DriverError, FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        print_json(manifest)
        return
    stdout.print(f"{manifest['part']}: {manifest['labels']} labels in {manifest['seconds']} s "
                 f"into {escape(out)}")
    stdout.print(f"by error type: {manifest['by_error_type']}")
    stdout.print(f"failures: {manifest['failures']}")


@bench_group.command("membase")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Benchmark directory.")
@click.option("--seed", default=0, show_default=True, help="Seed of every choice and id.")
@click.option("--system", "systems", multiple=True, help="Only these MemBase systems (repeatable): Mem0, "
              "Long-Context, NaiveRAG, EverMemOS [default: all].")
@click.option("--conversation", "conversations", multiple=True, callback=_plain_ids,
              help="Only these LoCoMo ids (repeatable) [default: the eight].")
@click.option("--per-type", type=click.IntRange(1), default=None,
              help="Faults planned per (system, conversation, error type) [default 6].")
@click.option("--jobs", type=click.IntRange(1), default=None, help="Worker processes [default: cores].")
@click.option("--locomo", type=click.Path(file_okay=False), default=None,
              help="LoCoMo directory [default: MEMTRACE_LOCOMO_DIR or ../shared/data/locomo].")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON on stdout.")
def membase_command(out: str, seed: int, systems: tuple[str, ...], conversations: tuple[str, ...],
                    per_type: int | None, jobs: int | None, locomo: str | None, as_json: bool) -> None:
    """The MemBase-vocabulary part: annotated smartcomment graphs traced as MemBase traces its systems.

    Score them with `memtrace bench score --format memtracebench DIR --engine NAME`.
    """
    from memtrace_bench.membase.build import MembaseConfig, build_membase

    config = MembaseConfig(out=out, seed=seed, locomo=locomo, jobs=jobs)
    if systems:
        config.systems = list(systems)
    if conversations:
        config.conversations = list(conversations)
    if per_type:
        config.per_type = per_type
    try:
        manifest = build_membase(config, progress=lambda name, done, total: stderr.print(
            f"membase: {escape(name)} ({done}/{total})"))
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        print_json(manifest)
        return
    table = Table(title=f"{manifest['labelled_cases']} labelled cases in {escape(out)} "
                        f"({manifest['seconds']} s)")
    table.add_column("system")
    for name in _ERROR_TYPES:
        table.add_column(name.removesuffix("Error"), justify="right")
    for system, applicable in manifest["applicable"].items():
        counts = manifest["cases"].get(system, {})
        table.add_row(escape(system),
                      *[str(counts.get(t, 0)) if t in applicable else "n/a" for t in _ERROR_TYPES])
    stdout.print(table)


@bench_group.command("score")
@click.argument("directory", type=click.Path())
@click.option("--engine", "engine_name", required=True, help="Registered engine name.")
@click.option("--format", "fmt", type=click.Choice(["memtrace", "memtracebench"]), default="memtrace",
              show_default=True, help="A built benchmark directory, or MemTraceBench smartcomment graphs "
                                      "(a file or a directory of them).")
@click.option("--limit", type=click.IntRange(1), default=None, help="Score only the first N cases.")
@click.option("--signal", type=click.Choice(["gold", "correction", "judge", "feedback"]), default="gold",
              show_default=True,
              help="Score with a poorer failure signal than the gold answer (what production has).")
@click.option("--content", "content", type=click.Choice(["on", "off", "ref"]), default="on",
              show_default=True,
              help="Contents on the spans; removed at read time (capture off); or only in a side store.")
@click.option("--part", "parts", multiple=True, type=click.Choice(_PARTS),
              help="Only the cases of this benchmark part (repeatable; default: all).")
@click.option("--json", "as_json", is_flag=True, help="Write the scores as JSON on stdout.")
def score_command(directory: str, engine_name: str, fmt: str, limit: int | None, signal: str, content: str,
                  parts: tuple[str, ...], as_json: bool) -> None:
    """Error-type and operation accuracy of an engine on a built benchmark."""
    if fmt == "memtracebench":
        if parts:
            raise click.BadParameter("MemTraceBench graphs have no parts", param_hint="--part")
        _score_memtracebench(directory, engine_name, signal, as_json)
        return
    from memtrace_bench.score import score_cases, summarize

    with _progress() as bar:
        task = bar.add_task(f"scoring {escape(engine_name)}", total=None)
        try:
            results, problems = score_cases(
                directory, engine_name, limit=limit, signal=signal, content=content, parts=parts or None,
                progress=lambda done, total: bar.update(task, completed=done, total=total))
        except (FileNotFoundError, ValueError) as error:
            raise click.ClickException(str(error)) from None
    summary = summarize(results, engine_name)
    summary.update(signal=signal, content=content, parts=list(parts) or None)
    _report_scores(summary, results, problems, as_json, partial=any(r.problem for r in results))


def _report_scores(summary: dict[str, Any], results: list[Any], problems: list[str], as_json: bool, *,
                   partial: bool) -> None:
    """Problems on stderr (the first 50), the scores on stdout; exit 3 when some case went wrong."""
    problems.extend(f"{r.case_id}: {r.problem}" for r in results if r.problem)
    for line in problems[:50]:
        stderr.print(f"memtrace: {escape(line)}", soft_wrap=True)
    if as_json:
        print_json(summary)
    else:
        _print_summary(summary)
    if partial:
        raise SystemExit(EXIT_PARTIAL)


def _score_memtracebench(path: str, engine_name: str, signal: str, as_json: bool) -> None:
    """``--format memtracebench``: MemTrace's exact-match metrics on annotated smartcomment graphs."""
    from memtrace_bench.memtracebench import score_memtracebench
    from memtrace_bench.score import summarize

    with _progress() as bar:
        task = bar.add_task(f"scoring {escape(engine_name)}", total=None)
        try:
            results, problems = score_memtracebench(
                [path], engine_name, signal=signal,
                progress=lambda done, total: bar.update(task, completed=done, total=total))
        except ValueError as error:
            raise click.ClickException(str(error)) from None
    summary = summarize(results, engine_name)
    summary.update(signal=signal, content="on", format="memtracebench")  # graphs carry their values
    _report_scores(summary, results, problems, as_json,
                   partial=bool(problems) or not results or any(r.problem for r in results))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title=f"engine {escape(summary['engine'])}, signal {escape(str(summary.get('signal')))}, "
                        f"content {escape(str(summary.get('content')))}")
    top_k = f"top-{summary.get('top_k', 3)} op"
    for column in ("group", "cases", "type acc.", "op acc.", top_k, "s/case", "tokens/case"):
        table.add_column(column, justify="left" if column == "group" else "right")
    rows = [("overall", summary["overall"])]
    rows += [(f"system {s}", r) for s, r in summary["by_system"].items()]
    rows += [(f"type {t}", r) for t, r in summary["by_error_type"].items()]
    rows += [(f"part {p}", r) for p, r in summary.get("by_part", {}).items()]
    for name, r in rows:
        if not r["cases"]:
            continue
        table.add_row(escape(name), str(r["cases"]), _pct(r["type_accuracy"]), _pct(r["operation_accuracy"]),
                      _pct(r.get("top_k_operation_accuracy")), f"{r['seconds_per_case']:.4f}",
                      f"{r['tokens_per_case']:.0f}")
    stdout.print(table)
    _print_cells(summary)
    confusion = Table(title="error-type confusion (rows gold, columns predicted)")
    predicted = sorted({p for row in summary["confusion"].values() for p in row})
    confusion.add_column("gold")
    for name in predicted:
        confusion.add_column(escape(name.removesuffix("Error")), justify="right")
    for gold, row in summary["confusion"].items():
        if row:
            confusion.add_row(escape(gold), *[str(row.get(p, 0)) for p in predicted])
    stdout.print(confusion)


def _cell(rates: dict[str, Any] | None) -> str:
    if not rates or not rates["cases"]:
        return "-"
    return f"{100 * rates['operation_accuracy']:.1f}/{100 * rates['type_accuracy']:.1f}"


def _print_cells(summary: dict[str, Any]) -> None:
    """Operation / error-type accuracy (%) per (gold error type, system); ``-``: no such case.

    Error types are rows so that the table stays within 80 columns for the four systems.
    """
    table = Table(title="op/type accuracy % per gold error type and system", box=box.SIMPLE_HEAD,
                  padding=(0, 0, 0, 1))
    systems = list(summary["cells"])
    table.add_column("gold type", no_wrap=True)
    for name in (*systems, "all"):
        table.add_column(escape(name), justify="right", no_wrap=True)
    for error_type in _ERROR_TYPES:
        table.add_row(error_type.removesuffix("Error"),
                      *[_cell(summary["cells"][s].get(error_type)) for s in systems],
                      _cell(summary["by_error_type"].get(error_type)))
    table.add_row("all", *[_cell(summary["by_system"].get(s)) for s in systems], _cell(summary["overall"]))
    stdout.print(table)
