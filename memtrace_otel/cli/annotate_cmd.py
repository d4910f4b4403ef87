"""``memtrace annotate``: attribute the failed evaluations already stored in Jaeger or Tempo, and write
the verdicts back into the traces, in one bounded batch (from a terminal or from cron).

Why a batch command: the in-process processor annotates only what its process sees live, and
``memtrace serve`` only what a Collector sends it; traces already in the backend (before either was
set up, or while it was down) get their annotations from here, with nothing else to run.

The run, each step the library's own:

1. the backend's search for failed evaluations
   (:class:`~memtrace_otel.spans.backend.FailureSearch`), per ``--service``, in the window, and with
   ``--evaluation-name`` for an evaluator's ``gen_ai.evaluation.result`` events of that name (the
   graph's :class:`~memtrace_otel.signals.FailureRule` says which of them failed);
2. failures whose evaluation already has its ``memtrace.attribution`` child span are skipped: the
   command is idempotent, a second run over the same window writes nothing;
3. :func:`~memtrace_otel.attribution.runner.load_graph` gathers the traces the rest need (span
   links, and with ``--store-lookback`` the store search) and builds one graph;
   :func:`~memtrace_otel.attribution.runner.attribute_failures` judges the pending failures;
4. :func:`~memtrace_otel.writeback.annotations.annotate` makes the spans, with the resource
   (``service.name`` and the rest) of the evaluation's trace, so that a tag search of the
   application's service finds them, and they are exported by OTLP/HTTP (``--backend-otlp``).

Exit codes: 0 every failure found is annotated (now or before); 1 nothing could be searched or
nothing written; 2 usage; 3 done in part (a search hit ``--limit``, some traces were not fetched,
some spans not exported, or input problems: each said on stderr).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import click
import networkx as nx
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memtrace_otel.attribution import runner
from memtrace_otel.attribution.base import Attribution
from memtrace_otel.cli.common import (
    EXIT_PARTIAL,
    EngineChoice,
    content_resolver,
    content_store_option,
    open_backend_option,
    print_json,
    report_problems,
    say,
    stderr,
    stdout,
    store_lookback_option,
)
from memtrace_otel.cli.terminal import safe_markup, safe_text
from memtrace_otel.config import ENV_JAEGER_URL, ENV_TEMPO_URL
from memtrace_otel.extras import missing_extra
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.semconv import WRITEBACK_SCOPE, AnnotationSpan, MemTrace, MemTraceAttribution
from memtrace_otel.spans.backend import FailureSearch
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.readers import SpanReadResult
from memtrace_otel.version import __version__

__all__ = ["annotate_command", "parse_time", "traces_endpoint"]

_EXPORT_BATCH = 512  # spans per OTLP request: far below any backend's request size limit
_EXPORT_TIMEOUT = 10.0  # seconds per OTLP request (the exporter retries within it)


def parse_time(text: str) -> float:
    """Unix seconds from ``text``: a number of Unix seconds, or an ISO 8601 date-time (UTC if it
    names no zone).

    >>> parse_time("1700000000"), parse_time("2023-11-14T22:13:20Z")
    (1700000000.0, 1700000000.0)

    Raises
    ------
    ValueError
        Neither.
    """
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{text!r} is neither Unix seconds nor an ISO 8601 date-time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{text!r} is not a time")
    return seconds


class _TimeParam(click.ParamType):
    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_time(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


@dataclass
class _Found:
    """What the searches gave: every span, and which evaluations are failed and which annotated."""

    spans: SpanReadResult = field(default_factory=SpanReadResult)
    problems: list[Problem] = field(default_factory=list)
    limited: list[str] = field(default_factory=list)
    """Services whose search hit ``--limit`` (older failures left for a later run)."""
    searched: int = 0
    """Searches that answered."""

    def annotated(self) -> set[tuple[str, str]]:
        """(trace id, span id) of every evaluation that already has its ``memtrace.attribution`` span.

        The annotation's parent is the evaluation; its ``memtrace.attribution.evaluation.*`` ids say
        the same, and count too (a backend that dropped the parent reference still has them).
        """
        done: set[tuple[str, str]] = set()
        for span in self.spans.spans:
            if span.attributes.get(MemTraceAttribution.ANNOTATION) != AnnotationSpan.ATTRIBUTION.value:
                continue
            if span.parent_span_id:
                done.add((span.trace_id, span.parent_span_id))
            trace_id = span.attributes.get(MemTraceAttribution.EVALUATION_TRACE_ID)
            span_id = span.attributes.get(MemTraceAttribution.EVALUATION_SPAN_ID)
            if isinstance(trace_id, str) and isinstance(span_id, str):
                done.add((trace_id, span_id))
        return done


def _search(backend: FailureSearch, services: Sequence[str], evaluation_names: Sequence[str], start: float,
            end: float, limit: int, bar: Progress | None) -> _Found:
    """Per service: its failed ``record_evaluation`` verdicts, then each named evaluator's results.

    A trace two searches find is read twice; :class:`~memtrace_otel.spans.readers.SpanReadResult`
    keeps one copy of each span.
    """
    found = _Found()
    window = {"start_unix_nano": int(start * 1e9), "end_unix_nano": int(end * 1e9), "limit": limit}
    task = bar.add_task("searching", total=len(services) * (1 + len(evaluation_names))) if bar else None
    for service in services:
        fetches = [backend.search_failed_evaluations(service=service, **window)]
        for name in evaluation_names:
            fetches.append(backend.search_evaluator_results(name, service=service, **window))
        for fetch in fetches:
            found.spans.add(fetch.spans)
            found.problems.extend(fetch.problems)
            found.searched += not fetch.problems or bool(fetch.received)
            if bar is not None and task is not None:
                bar.advance(task)
        if any(fetch.limited for fetch in fetches):
            found.limited.append(service)
    return found


def _pending(G: nx.DiGraph, searched: set[str], annotated: set[tuple[str, str]]) -> list[str]:
    """The failed evaluations of the searched traces with no annotation yet, in execution order."""
    return [node for node in failed_evaluations(G)
            if G.nodes[node].get("trace_id") in searched
            and (G.nodes[node].get("trace_id"), G.nodes[node].get("span_id")) not in annotated]


def _resource_of(records: Sequence[SpanRecord]) -> dict[tuple[str, str], dict[str, Any]]:
    """(trace id, span id) -> the resource attributes the span was recorded with."""
    resources: dict[tuple[str, str], dict[str, Any]] = {}
    for span in records:
        attributes = dict(span.resource_attributes)
        if span.service_name and "service.name" not in attributes:
            attributes["service.name"] = span.service_name
        resources[(span.trace_id, span.span_id)] = attributes
    return resources


def _write(G: nx.DiGraph, attributions: Sequence[Attribution],
           resources: dict[tuple[str, str], dict[str, Any]], quotable: bool) -> list[ReadableSpan]:
    """The annotation spans of every verdict, each with the resource of its evaluation's span.

    One provider per distinct resource, in first-seen order (deterministic), each collecting its
    ended spans in memory: they are exported afterwards, in batches whose outcome is known.
    """
    by_resource: dict[tuple[tuple[str, str], ...], list[Attribution]] = defaultdict(list)
    for attribution in attributions:
        data = G.nodes[attribution.case.evaluation]
        resource = resources.get((data["trace_id"], data["span_id"])) or {"service.name": "memtrace"}
        by_resource[tuple(sorted((k, str(v)) for k, v in resource.items()))].append(attribution)
    from memtrace_otel.writeback.annotations import annotate

    spans: list[ReadableSpan] = []
    for key, group in by_resource.items():
        collected = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource(dict(key)))
        provider.add_span_processor(SimpleSpanProcessor(collected))
        annotate(provider.get_tracer(WRITEBACK_SCOPE, __version__), G, group, include_explanation=quotable)
        provider.shutdown()
        spans.extend(collected.get_finished_spans())
    return spans


def _export(spans: Sequence[ReadableSpan], endpoint: str, bar: Progress | None) -> int:
    """Send ``spans`` to the OTLP/HTTP ``endpoint``; how many were accepted."""
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    session = requests.Session()
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=_EXPORT_TIMEOUT, session=session)
    task = bar.add_task("writing", total=len(spans)) if bar is not None else None
    sent = 0
    try:
        for first in range(0, len(spans), _EXPORT_BATCH):
            batch = spans[first:first + _EXPORT_BATCH]
            if exporter.export(batch) is SpanExportResult.SUCCESS:
                sent += len(batch)
            if bar is not None and task is not None:
                bar.advance(task, len(batch))
    finally:
        exporter.shutdown()
    return sent


def traces_endpoint(url: str) -> str:
    """The OTLP/HTTP traces URL of ``--backend-otlp``: a base URL gets ``/v1/traces``, as ``serve``'s does.

    >>> traces_endpoint("http://127.0.0.1:4318"), traces_endpoint("127.0.0.1:4318/v1/traces")
    ('http://127.0.0.1:4318/v1/traces', 'http://127.0.0.1:4318/v1/traces')

    Raises
    ------
    ValueError
        Not ``http(s)://host[:port][/path]``.
    """
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"backend OTLP endpoint {url!r} is not http(s)://host:port")
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path if path.endswith('/v1/traces') else path + '/v1/traces'}"


def _row(G: nx.DiGraph, a: Attribution) -> dict[str, Any]:
    data = G.nodes[a.case.evaluation]
    return {"trace_id": data["trace_id"], "span_id": data["span_id"], "case_id": a.case.case_id,
            "error_type": a.error_type.value if a.error_type else None, "operation_name": a.operation_name,
            "root_cause_trace_id": a.trace_id, "root_cause_span_id": a.span_id,
            "failure_reason": a.failure_reason}


def _window(since: float | None, until: float | None, lookback: float) -> tuple[float, float]:
    end = until if until is not None else time.time()
    start = since if since is not None else end - lookback
    if start >= end:
        raise click.BadParameter("the window is empty: --since must be before --until (or now)",
                                 param_hint="--since")
    return start, end


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@click.command("annotate")
@click.option("--jaeger", "jaeger_url", envvar=ENV_JAEGER_URL, metavar="URL",
              help=f"Jaeger query URL to search (e.g. http://127.0.0.1:16686) [env {ENV_JAEGER_URL}].")
@click.option("--tempo", "tempo_url", envvar=ENV_TEMPO_URL, metavar="URL",
              help=f"Tempo HTTP API URL to search, or (e.g. http://127.0.0.1:3200) [env {ENV_TEMPO_URL}].")
@click.option("--service", "services", multiple=True, required=True, metavar="NAME",
              help="service.name of the application whose failed evaluations are searched (repeatable).")
@click.option("--lookback", type=click.FloatRange(min=0, min_open=True), default=3600.0, show_default=True,
              metavar="SECONDS", help="Window: this many seconds before --until (or now).")
@click.option("--since", type=_TimeParam(), default=None,
              help="Window start: Unix seconds or ISO 8601 (UTC if no zone); overrides --lookback.")
@click.option("--until", type=_TimeParam(), default=None, help="Window end (default: now).")
@click.option("--limit", type=click.IntRange(min=1), default=200, show_default=True,
              help="Most traces with failures taken per service and run (the newest); bounds the run.")
@click.option("--evaluation-name", "evaluation_names", multiple=True, metavar="NAME",
              help="Also search for an evaluator's gen_ai.evaluation.result events of this "
                   "gen_ai.evaluation.name (repeatable); a result fails by its label, or a score under "
                   "MEMTRACE_EVALUATION_FAIL_BELOW, as in analyze.")
@click.option("--backend-otlp", "otlp_url", metavar="URL",
              help="OTLP/HTTP endpoint of the same backend, where the annotations go (e.g. "
                   "http://127.0.0.1:4318; /v1/traces is added when missing).")
@click.option("--dry-run", is_flag=True, help="Attribute and report, write nothing.")
@click.option("--engine", type=EngineChoice(), default="lineage", show_default=True,
              help="Attribution engine.")
@store_lookback_option
@content_store_option
@click.option("--json", "as_json", is_flag=True, help="Write the outcome as JSON on stdout.")
@click.pass_context
def annotate_command(
    ctx: click.Context, jaeger_url: str | None, tempo_url: str | None, services: tuple[str, ...],
    lookback: float, since: float | None, until: float | None, limit: int,
    evaluation_names: tuple[str, ...], otlp_url: str | None, dry_run: bool, engine: str,
    store_lookback: float, content_store: str | None, as_json: bool,
) -> None:
    """Annotate the failed evaluations stored in Jaeger (--jaeger) or Tempo (--tempo) in a time window.

    The failures are record_evaluation's verdicts (memtrace.evaluation.passed=false) and, with
    --evaluation-name, an evaluator's failing gen_ai.evaluation.result events of that name.
    Each failure gets its memtrace.attribution span (under the evaluation) and memtrace.root_cause
    span (under the blamed operation), written by OTLP to --backend-otlp; failures annotated before
    are skipped, so running it again (from cron) writes only what is new. Never prompts.
    Exit 0 all annotated, 1 nothing searched or written, 3 done in part.
    """
    if not (jaeger_url or tempo_url):
        raise click.UsageError("give the trace backend to search: --jaeger URL or --tempo URL")
    if not (otlp_url or dry_run):
        raise click.UsageError("give --backend-otlp URL (where the annotations are written) or --dry-run")
    start, end = _window(since, until, lookback)
    if otlp_url:
        try:
            otlp_url = traces_endpoint(otlp_url)
        except ValueError as error:
            raise click.BadParameter(safe_text(error), param_hint="--backend-otlp") from None
    if not dry_run:
        try:
            import opentelemetry.exporter.otlp.proto.http  # noqa: F401 - only: is the extra installed?
        except ImportError:
            raise click.ClickException(missing_extra("`memtrace annotate` (it writes by OTLP/HTTP; or use "
                                                     "--dry-run)", "serve")) from None
    backend = open_backend_option(jaeger_url, tempo_url)
    if not isinstance(backend, FailureSearch):
        raise click.UsageError(f"{safe_text(getattr(backend, 'name', backend))} cannot search for failures")
    resolver = content_resolver(content_store)
    show_bar = not as_json and stderr.is_terminal
    bar = Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=stderr, transient=True, disable=not show_bar)
    with bar:
        found = _search(backend, services, evaluation_names, start, end, limit, bar)
        if not found.searched:
            report_problems(found.problems, strict=False)
            raise click.ClickException(f"no search of {safe_text(backend.name)} answered; nothing annotated")
        searched_traces = {span.trace_id for span in found.spans.spans}
        annotated = found.annotated()
        analysis = runner.load_graph(found.spans, backend=backend, store_lookback=store_lookback,
                                     content_store=resolver)
        G = analysis.graph
        failures = [n for n in failed_evaluations(G) if G.nodes[n].get("trace_id") in searched_traces]
        pending = _pending(G, searched_traces, annotated)
        task = bar.add_task("attributing", total=len(pending))
        attributions = runner.attribute_failures(
            G, engine, evaluations=pending, warn=lambda m: say(f"warning: {safe_markup(m)}"),
            progress=lambda done, _total: bar.update(task, completed=done)) if pending else []
        # Contents read from a store were kept out of the backend on purpose: no quoting them into it.
        quotable = resolver is None or not any(MemTrace.CONTENT_REF in s.attributes
                                               for s in analysis.spans.spans)
        spans = _write(G, attributions, _resource_of(analysis.spans.spans), quotable) if attributions else []
        sent = _export(spans, otlp_url, bar) if spans and otlp_url and not dry_run else 0
    problems = [*found.problems, *analysis.problems]
    code = report_problems(problems, strict=False) if problems else 0
    if found.limited:
        say(f"the search of {len(found.limited)} service(s) hit --limit {limit}: older failures are left "
            "for another run (or a larger --limit)")
        code = EXIT_PARTIAL
    written = sent if not dry_run else 0
    failed_export = len(spans) - sent if (spans and not dry_run) else 0
    if failed_export:
        say(f"{failed_export} of {len(spans)} annotation span(s) not accepted by "
            f"{safe_markup(otlp_url or '')}")
        code = 1 if sent == 0 else EXIT_PARTIAL
    unattributed = sum(a.operation is None for a in attributions)
    outcome = {
        "backend": backend.name, "services": list(services), "since": _iso(start), "until": _iso(end),
        "traces_searched": len(searched_traces), "failures": len(failures),
        "already_annotated": len(failures) - len(pending), "annotated": len(attributions) if written else 0,
        "unattributed": unattributed, "spans_written": written, "spans_not_written": failed_export,
        "dry_run": dry_run, "limited": found.limited, "exit_code": code,
        "annotations": [_row(G, a) for a in attributions],
    }
    if as_json:
        print_json(outcome)
    else:
        where = "" if dry_run else f" to {safe_markup(otlp_url or '')}"
        stdout.print(
            f"{len(failures)} failed evaluation(s) in {len(searched_traces)} trace(s) of "
            f"{safe_markup(', '.join(services))} from {outcome['since']} to {outcome['until']}: "
            f"{outcome['already_annotated']} already annotated, "
            + (f"{len(attributions)} would be annotated (dry run)" if dry_run else
               f"{outcome['annotated']} annotated now ({written} span(s) written{where})")
            + (f", {unattributed} without a root cause" if unattributed else ""),
            soft_wrap=True)  # one line in a cron log, whatever the width
    ctx.exit(code)
