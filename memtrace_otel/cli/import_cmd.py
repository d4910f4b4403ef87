"""``memtrace import smartcomment GRAPH.json[.gz]...``: other tracers' graphs as OTLP spans.

The spans go to an OTLP/JSON Lines file (``--out``; ``.gz`` compresses), the
format every ``memtrace`` command and the Collector's ``otlpjsonfile`` receiver
read, or by OTLP/HTTP (JSON encoding) to a Collector, Jaeger or Tempo
(``--endpoint http://127.0.0.1:4318``), so a smartcomment graph can be opened
in a trace viewer: one trace per session, one span per operation.
"""

from __future__ import annotations

import gzip
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence

import click
import orjson

from memtrace_otel.cli.common import files_argument, print_json, report_problems, say, strict_option
from memtrace_otel.cli.terminal import safe_markup
from memtrace_otel.exporters.otlp_json_file import encode_traces_data
from memtrace_otel.semconv import SMARTCOMMENT_SCOPE
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.readers import gc_paused, read_span_files

__all__ = ["import_group", "post_otlp_json", "smartcomment_spans", "write_otlp_json"]

_BATCH = 2000  # spans per OTLP request or file line: well under the usual 4-16 MiB body limits
_TIMEOUT = 30.0


def _batches(spans: Sequence[SpanRecord]) -> Iterator[bytes]:
    for start in range(0, len(spans), _BATCH):
        yield orjson.dumps(encode_traces_data(spans[start:start + _BATCH], scope=SMARTCOMMENT_SCOPE))


def smartcomment_spans(files: Sequence[str]) -> tuple[list[SpanRecord], list[Problem]]:
    """The spans of smartcomment graph files; a file of another format is one problem, and skipped."""
    read = read_span_files(files)
    problems, spans = list(read.problems), []
    foreign: dict[str, None] = {}  # an ordered set of file names
    for span in read.spans:
        if span.scope_name == SMARTCOMMENT_SCOPE:
            spans.append(span)
        else:
            foreign.setdefault(span.source.rpartition(":")[0] or span.source, None)
    problems.extend(Problem(name, "not a smartcomment graph (OTLP or Jaeger spans); skipped")
                    for name in foreign)
    return spans, problems


def write_otlp_json(spans: Sequence[SpanRecord], path: str) -> None:
    """Write ``spans`` as OTLP/JSON Lines (one ``TracesData`` per line; gzip members for ``.gz``)."""
    opener = gzip.open if path.endswith(".gz") else open
    with gc_paused(), opener(path, "wb") as handle:  # encoding makes millions of acyclic dicts
        for line in _batches(spans):
            handle.write(line + b"\n")


def post_otlp_json(spans: Sequence[SpanRecord], endpoint: str, *, timeout: float = _TIMEOUT) -> int:
    """POST ``spans`` to an OTLP/HTTP receiver (``/v1/traces`` appended unless given); returns requests made.

    Raises
    ------
    OSError
        The receiver could not be reached or refused a batch (the message says which).
    """
    url = endpoint if urllib.parse.urlsplit(endpoint).path.endswith("/v1/traces") \
        else endpoint.rstrip("/") + "/v1/traces"
    requests = 0
    for body in _batches(spans):
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            # the scheme is http(s): checked by _check_target
            with urllib.request.urlopen(request, timeout=timeout) as response:
                response.read()
        except urllib.error.HTTPError as error:
            raise OSError(f"{url} answered {error.code} {error.reason}") from None
        except (urllib.error.URLError, TimeoutError) as error:
            raise OSError(f"{url}: {getattr(error, 'reason', error)}") from None
        requests += 1
    return requests


def _check_target(out: str | None, endpoint: str | None) -> None:
    if (out is None) == (endpoint is None):
        raise click.UsageError("give one of --out FILE and --endpoint URL")
    if endpoint is not None and urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
        raise click.BadParameter(f"{endpoint[:80]!r} is not an http(s) URL", param_hint="--endpoint")


@click.group("import")
def import_group() -> None:
    """Convert other tracers' graphs into OTLP spans (a file, or a Collector/Jaeger/Tempo endpoint)."""


@import_group.command("smartcomment")
@files_argument
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="OTLP/JSON Lines file to write (.gz compresses).")
@click.option("--endpoint", "endpoint", default=None, metavar="URL",
              help="OTLP/HTTP receiver, e.g. http://127.0.0.1:4318 (Collector, Jaeger, Tempo).")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print what was imported as JSON on stdout.")
def smartcomment_command(files: tuple[str, ...], out: str | None, endpoint: str | None, strict: bool,
                         as_json: bool) -> None:
    """smartcomment execution graphs (ExecNetwork.export_graph(), MemTraceBench files) as OTLP spans."""
    _check_target(out, endpoint)
    spans, problems = smartcomment_spans(files)
    try:
        if out is not None:
            write_otlp_json(spans, out)
        else:
            post_otlp_json(spans, endpoint or "")
    except OSError as error:
        raise click.ClickException(str(error)) from None
    summary = {"spans": len(spans), "traces": len({s.trace_id for s in spans}),
               "target": out or endpoint, "problems": [str(p) for p in problems]}
    code = report_problems(problems, strict=strict)
    if as_json:
        print_json(summary)
    else:
        say(f"{summary['spans']} spans in {summary['traces']} traces written to "
            f"{safe_markup(str(summary['target']))}")
    if code:
        raise SystemExit(code)
