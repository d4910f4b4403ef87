"""What every subcommand that reads span files shares: reading, problem lines, exit codes.

Exit codes: 0 all read; 1 a domain error (or a problem under ``--strict``);
2 a usage error (click); 3 the command ran but some input was skipped or
repaired, or is incomplete (each problem was printed on stderr as one line).
Every human-readable line goes through :mod:`memtrace_otel.cli.terminal`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click
import networkx as nx
from click.core import ParameterSource
from rich.console import Console

from memtrace_otel.attribution import runner
from memtrace_otel.attribution.base import available_engines, create_engine
from memtrace_otel.cli.terminal import safe_markup, safe_text
from memtrace_otel.config import ENV_CONTENT_STORE, ENV_JAEGER_URL, ENV_TEMPO_URL
from memtrace_otel.content.resolve import ContentResolver
from memtrace_otel.content.store import ContentStoreError
from memtrace_otel.extras import missing_extra
from memtrace_otel.spans.backend import TraceBackend
from memtrace_otel.spans.gather import BackendChoiceError, Gathered, open_backend
from memtrace_otel.spans.model import Problem
from memtrace_otel.spans.readers import STDIN, SpanReadResult, read_span_files
from memtrace_otel.spans.store_scope import StoreFetch

__all__ = [
    "EXIT_PARTIAL",
    "EngineChoice",
    "check_one_backend",
    "content_resolver",
    "content_store_option",
    "end_command",
    "files_argument",
    "jaeger_option",
    "load_analysis",
    "load_graph",
    "open_backend_option",
    "print_json",
    "report_problems",
    "say",
    "stderr",
    "stdout",
    "store_lookback_option",
    "strict_option",
    "tempo_option",
]

EXIT_PARTIAL = 3
MAX_PROBLEM_LINES = 50

# emoji=False: rich would otherwise turn ":smile:" in user content into an emoji.
stdout = Console(highlight=False, emoji=False)
stderr = Console(stderr=True, highlight=False, emoji=False)

files_argument = click.argument(
    "files", nargs=-1, required=True, metavar="FILE...",
    type=click.Path(dir_okay=True, allow_dash=True),
)
strict_option = click.option(
    "--strict", is_flag=True, help="Treat any skipped or repaired input as fatal (exit 1)."
)
jaeger_option = click.option(
    "--jaeger", "jaeger_url", envvar=ENV_JAEGER_URL, metavar="URL",
    help="Jaeger query URL (e.g. http://127.0.0.1:16686): fetch the linked traces the files "
         f"point at but do not hold, such as the ingestion that wrote a memory [env {ENV_JAEGER_URL}].")
tempo_option = click.option(
    "--tempo", "tempo_url", envvar=ENV_TEMPO_URL, metavar="URL",
    help="Grafana Tempo HTTP API URL (e.g. http://127.0.0.1:3200): like --jaeger, from Tempo; "
         f"give one of the two [env {ENV_TEMPO_URL}].")


store_lookback_option = click.option(
    "--store-lookback", type=click.FloatRange(min=0), default=0.0, metavar="SECONDS",
    help="With --jaeger/--tempo: also search the backend for the traces that used the input's memory "
         "stores in the SECONDS before (a retrieval that missed a memory has no link to the trace "
         "that wrote it). Only the input's failures are analysed. Default 0: follow links only.")

content_store_option = click.option(
    "--content-store", "content_store", envvar=ENV_CONTENT_STORE, metavar="PATH_OR_URL",
    help="Content store the spans' references point into (a directory, or an fsspec URL such as "
         "s3://bucket/prefix): variable contents the spans left there are read back. A store that "
         f"cannot be read is one line; analysis goes on without content [env {ENV_CONTENT_STORE}].")


class EngineChoice(click.Choice):
    """``--engine``: the registered engines, looked up only when needed: importing them all is not
    free, and ``memtrace --help`` should not pay for it."""

    def __init__(self) -> None:
        super().__init__(())

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        return tuple(available_engines())

    @choices.setter
    def choices(self, _value: object) -> None:
        pass  # click.Choice.__init__ assigns it; the registry is the truth

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        name = super().convert(value, param, ctx)
        # An LLM engine without the openai package would fail on every case, one line each: say it once.
        from memtrace_otel.attribution.llm_baselines import LLMEngineBase

        if importlib.util.find_spec("openai") is None and isinstance(create_engine(name), LLMEngineBase):
            raise click.ClickException(missing_extra(f"--engine {name}", "openai"))
        return name


def content_resolver(content_store: str | None) -> ContentResolver | None:
    """The reader of ``--content-store``, or ``None`` when not given.

    Raises
    ------
    click.BadParameter
        A path or URL no filesystem serves (unknown protocol, fsspec package missing).
    """
    if not content_store:
        return None
    try:
        return ContentResolver(content_store, log=False)  # said as problem lines, once
    except ContentStoreError as error:
        raise click.BadParameter(safe_text(error), param_hint="--content-store") from None


def say(message: str) -> None:
    """One line on stderr; ``message`` is rich markup whose user content went through ``safe_markup``."""
    stderr.print(f"memtrace: {message}", soft_wrap=True)


def end_command(code: int) -> NoReturn:
    """Exit with ``code`` at the end of a command that holds a large graph (``graph``, ``report``,
    ``analyze``).

    Run as the ``memtrace`` command, the process ends without tearing its heap down object by object:
    standard output and error are flushed, logging is shut down and ``os._exit`` ends it, as mypy does.
    Freeing a 100k-span graph's half a million dicts one by one is a fifth of a second of CPU (the
    command's output is all written by then) that the operating system does at once. Called in
    process (click's test runner, an application passing its own arguments) it raises
    ``SystemExit`` as every other command does, so the caller's process lives on.
    """
    from memtrace_otel.cli import from_command_line

    if from_command_line():
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:  # a closed pipe: the ordinary exit says so as Python always has
            raise SystemExit(code) from None
        logging.shutdown()
        os._exit(code)
    raise SystemExit(code)


def report_problems(problems: Sequence[Problem], *, strict: bool) -> int:
    """Print each problem as one line on stderr; the exit code they call for."""
    for problem in problems[:MAX_PROBLEM_LINES]:
        say(safe_markup(problem))
    if len(problems) > MAX_PROBLEM_LINES:
        say(f"... and {len(problems) - MAX_PROBLEM_LINES} more problems")
    if not problems:
        return 0
    if strict:
        raise click.ClickException(f"{len(problems)} input problem(s) and --strict was given")
    return EXIT_PARTIAL


def load_graph(
    files: Sequence[str], *, jaeger_url: str | None = None, tempo_url: str | None = None,
    content_store: str | None = None, store_lookback: float = 0.0,
) -> tuple[SpanReadResult, nx.DiGraph, list[Problem]]:
    """:func:`load_analysis`'s spans, graph and problems."""
    found = load_analysis(files, jaeger_url=jaeger_url, tempo_url=tempo_url, content_store=content_store,
                          store_lookback=store_lookback)
    return found.spans, found.graph, found.problems


def load_analysis(
    files: Sequence[str], *, jaeger_url: str | None = None, tempo_url: str | None = None,
    content_store: str | None = None, store_lookback: float = 0.0,
) -> runner.Analysis:
    """Read ``files`` (``-`` is standard input) and build one graph (:func:`memtrace_otel.attribution.
    runner.load_graph`), saying on stderr what the backend gave; all problems together.

    With ``jaeger_url`` (or ``tempo_url``), traces the input links to but lacks are fetched from
    Jaeger (or Tempo), and the traces those link to, a few rounds deep: the trace backend, not
    memtrace, is where writes and later reads meet again. With ``store_lookback`` > 0 too, the
    backend is also searched for the traces that used the input's memory stores in that many
    seconds before (spans/store_scope). The graph's ``input_traces`` names the traces the files
    held. With ``content_store``, contents the spans reference are read from it; a store that
    cannot be read, or lacks texts, is one problem each.

    Raises
    ------
    click.ClickException
        When not one of ``files`` exists (a typo, not partial input).
    click.UsageError
        Both ``jaeger_url`` and ``tempo_url``.
    click.BadParameter
        A malformed ``jaeger_url``, ``tempo_url`` or ``content_store``.
    """
    backend = open_backend_option(jaeger_url, tempo_url)
    resolver = content_resolver(content_store)
    found = runner.load_graph(_read(files), backend=backend, store_lookback=store_lookback,
                              content_store=resolver)
    if found.gathered is not None and backend is not None:
        url = jaeger_url or tempo_url or ""
        _say_gathered(found.gathered, backend, url, found.input_traces)
        _one_line_for_a_failed_store_search(found, url)
    return found


def _failed_wholly(store: StoreFetch | None, input_traces: set[str]) -> bool:
    """Every store search failed (the backend is down, or refuses): nothing but problems came back."""
    return store is not None and bool(store.problems) and not store.received - input_traces


def _one_line_for_a_failed_store_search(found: runner.Analysis, url: str) -> None:
    """A store search that failed wholly is one problem that says so, not one per store with its URL."""
    store = found.gathered.store if found.gathered is not None else None
    if store is None or not _failed_wholly(store, found.input_traces):
        return
    reasons = sorted({problem.message.rpartition(" failed: ")[2] for problem in store.problems})
    failed = set(store.problems)
    found.problems[:] = [problem for problem in found.problems if problem not in failed]
    more = f" (and {len(reasons) - 1} other error(s))" if len(reasons) > 1 else ""
    found.problems.append(Problem(url, f"could not search {len(store.searched)} memory store(s) for the "
                                       f"traces that used them: {reasons[0]}{more}"))


def _read(files: Sequence[str]) -> SpanReadResult:
    missing = [f for f in files if f != STDIN and not os.path.lexists(f)]
    if missing and len(missing) == len(files):
        raise click.ClickException("; ".join(f"{safe_text(f)}: no such file" for f in missing))
    result = read_span_files(files)
    if not result.spans and not result.problems:  # the readers say which file; this is the backstop
        result.problems.append(Problem(", ".join(files), "no spans in the input"))
    return result


def check_one_backend(jaeger_url: str | None, tempo_url: str | None) -> None:
    """Refuse ``--jaeger`` with ``--tempo``: linked traces come from one backend.

    The rule is :func:`~memtrace_otel.spans.gather.open_backend`'s; this says it as a usage error
    that names the environment variable either came from.

    Raises
    ------
    click.UsageError
        Both are given.
    """
    if not (jaeger_url and tempo_url):
        return
    ctx = click.get_current_context(silent=True)

    def named(option: str, param: str, variable: str) -> str:
        source = ctx.get_parameter_source(param) if ctx is not None else None
        return f"{option} (from {variable})" if source is ParameterSource.ENVIRONMENT else option

    raise click.UsageError(f"{named('--jaeger', 'jaeger_url', ENV_JAEGER_URL)} and "
                           f"{named('--tempo', 'tempo_url', ENV_TEMPO_URL)} are mutually exclusive: "
                           "give the one trace backend to fetch linked traces from")


def open_backend_option(jaeger_url: str | None, tempo_url: str | None) -> TraceBackend | None:
    """:func:`~memtrace_otel.spans.gather.open_backend` with its errors as click's.

    Raises
    ------
    click.UsageError
        Both are given (:func:`check_one_backend`).
    click.BadParameter
        A malformed URL, naming its option.
    """
    try:
        return open_backend(jaeger_url, tempo_url)
    except BackendChoiceError:
        check_one_backend(jaeger_url, tempo_url)
        raise
    except ValueError as error:
        option = "--jaeger" if jaeger_url else "--tempo"
        raise click.BadParameter(safe_text(error), param_hint=option) from None


def _say_gathered(gathered: Gathered, backend: TraceBackend, url: str, input_traces: set[str]) -> None:
    """One line per pass over the links that asked for something, one for the store search."""
    first, *rest = gathered.linked
    _say_linked(first.requested, first.received, url)
    store = gathered.store
    if store is not None:
        if not store.searchable:
            say(f"{safe_markup(backend.name)} cannot search traces by attribute: --store-lookback ignored")
        elif store.searched and not _failed_wholly(store, input_traces):  # else one problem says so
            stores = len({use.store_id for use in store.searched})
            found = len(store.received - input_traces)
            say(f"searched {stores} memory store(s) at {safe_markup(url)}: {found} more trace(s) used them"
                + (f"; {len(store.limited)} search(es) hit the limit, older traces not fetched"
                   if store.limited else ""))
    for fetch in rest:
        _say_linked(fetch.requested, fetch.received, url)


def _say_linked(requested: set[str], received: set[str], url: str) -> None:
    if requested:
        say(f"fetched {len(received)} of {len(requested)} linked trace(s) from {safe_markup(url)}")


def _json_safe(value: Any) -> Any:
    # json.dumps writes NaN/Infinity (not JSON) and refuses ints past the digit limit.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4096:
        return f"<{value.bit_length()}-bit integer>"
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [_json_safe(v) for v in sorted(value, key=str)]
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def print_json(data: Any) -> None:
    """Data only, on stdout (logs and problems go to stderr); always valid JSON.

    Written as it is encoded, a few thousand pieces at a time: the indenting encoder is pure Python,
    and the list of pieces it joins for ``json.dumps`` took more memory than the graph's attribution
    indexes (``memtrace analyze --json`` of 5,556 failures: about 60 MiB). A compact pass by the C
    encoder first checks that it can all be written, so nothing is half-written when it cannot.
    """
    try:
        json.dumps(data, sort_keys=True, default=str, allow_nan=False)
    except (TypeError, ValueError):
        data = _json_safe(data)
    encoder = json.JSONEncoder(indent=2, sort_keys=True, default=str, allow_nan=False)
    pieces: list[str] = []
    for piece in encoder.iterencode(data):
        pieces.append(piece)
        if len(pieces) >= 4096:
            sys.stdout.write("".join(pieces))
            pieces.clear()
    pieces.append("\n")
    sys.stdout.write("".join(pieces))
