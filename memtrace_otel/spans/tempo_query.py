"""A client of Grafana Tempo's trace-by-id HTTP API, standard library only.

Why: lineage crosses traces, and many users keep their traces in Tempo rather
than Jaeger. This client fetches the traces a graph links to but lacks from
Tempo, as :class:`~memtrace_otel.spans.jaeger_query.JaegerQueryClient` does
from Jaeger; both are :class:`~memtrace_otel.spans.backend.TraceBackend`.

What Tempo answers (its HTTP API documentation and ``pkg/tempopb``):

- ``GET /api/v2/traces/<id>`` (Tempo 2.6 and later) answers a
  ``TraceByIDResponse`` in protobuf's JSON mapping:
  ``{"trace": {"resourceSpans": [...]}, "status": "PARTIAL", "message": "..."}``
  (``status`` left out when the trace is complete). A trace Tempo does not
  have is an empty ``trace`` (or HTTP 404).
- ``GET /api/traces/<id>`` (every Tempo) answers ``{"batches": [...]}``, the
  same resource spans under their older name, and HTTP 404 for a trace it
  does not have. Tempo before 2.6 has no v2 route and answers it with 404, so
  a 404 from v2 is asked again of v1.

Both are OTLP "mostly compatible" JSON: ids in base64 (``"W47/95gDgQPS..."``),
enums by name (``"SPAN_KIND_SERVER"``), 64-bit integers as strings, all of
which :mod:`memtrace_otel.spans.otlp_json` reads. JSON is asked for
(``Accept: application/json``); Tempo's protobuf answer is not used.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from memtrace_otel.semconv import GenAI, MemTrace
from memtrace_otel.spans.backend import BackendFetch
from memtrace_otel.spans.http_fetch import (
    Bounds,
    HTTPFetchError,
    check_base_url,
    failure_problems,
    get_json_all,
    keep_trace_spans,
    normalize_trace_id,
    one_line,
)
from memtrace_otel.spans.model import Problem
from memtrace_otel.spans.otlp_json import records_from_traces_data

__all__ = ["TempoAPI", "TempoQueryClient", "TempoQueryError", "tempo_traces_data"]

_NOT_FOUND = 404
_PARTIAL = ("PARTIAL", 1)
_EMPTY_KEYS = {"metrics", "status", "message"}  # what an answer without a trace may still hold


class TempoQueryError(HTTPFetchError):
    """A request to Tempo's query API failed or its answer was not Tempo's; ``str()`` is one line."""


class TempoAPI(Enum):
    """The trace-by-id route a Tempo answers."""

    V2 = "/api/v2/traces"
    V1 = "/api/traces"


def tempo_traces_data(url: str, answer: Any) -> tuple[dict[str, Any], str]:
    """The OTLP ``TracesData`` object inside a Tempo trace-by-id answer, and why it is partial (or ``""``).

    >>> data, partial = tempo_traces_data("u", {"trace": {"resourceSpans": []}, "status": "PARTIAL",
    ...                                          "message": "Trace exceeds maximum size"})
    >>> data, partial
    ({'resourceSpans': []}, 'Trace exceeds maximum size')
    >>> tempo_traces_data("u", {"batches": []})
    ({'resourceSpans': []}, '')

    Raises
    ------
    TempoQueryError
        ``answer`` is neither a v2 answer (a ``trace`` object) nor a v1 one (a ``batches`` list).
    """
    if not isinstance(answer, dict):
        raise TempoQueryError(url, "not a Tempo trace-by-id answer (not a JSON object)")
    if "trace" in answer:
        trace = {} if answer["trace"] is None else answer["trace"]
        if not isinstance(trace, dict):
            raise TempoQueryError(url, "not a Tempo trace-by-id answer ('trace' is not an object)")
        spans = trace.get("resourceSpans", trace.get("resource_spans"))
        # An empty trace is how v2 says "not found"; anything else without the list is left to the reader.
        return {"resourceSpans": [] if spans is None and not trace else spans}, _partial(answer)
    if "batches" in answer:
        return {"resourceSpans": answer["batches"]}, ""
    if "resourceSpans" in answer:  # a Tempo-compatible store answering plain TracesData
        return answer, ""
    if set(answer) <= _EMPTY_KEYS:  # protobuf's JSON leaves an unset trace out
        return {"resourceSpans": []}, _partial(answer)
    raise TempoQueryError(url, "not a Tempo trace-by-id answer (no trace object or batches list)")


def _partial(answer: dict[str, Any]) -> str:
    if answer.get("status") not in _PARTIAL:
        return ""
    message = answer.get("message")
    return one_line(message) if isinstance(message, str) and message.strip() else "no reason given"


@dataclass
class _Answer:
    """One trace's answer: its ``TracesData`` (and why it is partial), or the error it came as."""

    url: str
    data: dict[str, Any] = field(default_factory=dict)
    partial: str = ""
    error: HTTPFetchError | None = None


class TempoQueryClient:
    """Fetches traces from Grafana Tempo's query API; a :class:`~memtrace_otel.spans.backend.TraceBackend`.

    Parameters
    ----------
    base_url:
        Tempo's HTTP API (the query-frontend, or the single binary), e.g. ``http://127.0.0.1:3200``;
        a path prefix (``http_api_prefix``) is kept.
    timeout:
        Seconds one request may take, from connect to its last byte.
    deadline:
        Seconds one :meth:`fetch_traces` call may take in all, the v1 retries included.
    concurrency:
        Requests at once.

    Raises
    ------
    ValueError
        A malformed ``base_url`` (not ``http(s)://host[:port]``) or a bound that is not positive.

    Thread-safe: the one thing it keeps between calls, which route the server answers
    (:attr:`api`, learnt from its first answers), is read and set under a lock.

    >>> TempoQueryClient("http://127.0.0.1:3200/").name
    'Tempo http://127.0.0.1:3200'
    """

    def __init__(self, base_url: str, *, timeout: float = 10.0, deadline: float = 60.0,
                 concurrency: int = 4) -> None:
        self.base_url = check_base_url(base_url, "Tempo query URL")
        self.bounds = Bounds(timeout, deadline, concurrency)
        self.name = f"Tempo {self.base_url}"
        self._lock = threading.Lock()
        self._api: TempoAPI | None = None

    @property
    def api(self) -> TempoAPI | None:
        """The route this Tempo answers, once an answer has told (``None`` before)."""
        with self._lock:
            return self._api

    def trace_url(self, trace_id: str, api: TempoAPI = TempoAPI.V2) -> str:
        return f"{self.base_url}{api.value}/{normalize_trace_id(trace_id)}"

    def fetch_trace(self, trace_id: str) -> dict[str, Any]:
        """One trace as an OTLP/JSON ``TracesData`` object (``{"resourceSpans": [...]}``), a span file.

        Raises
        ------
        ValueError
            A malformed ``trace_id``.
        TempoQueryError
            The request failed (HTTP 404 when Tempo does not have the trace), or the answer
            is not Tempo's.
        """
        trace_id = normalize_trace_id(trace_id)
        answer = self._ask([trace_id])[trace_id]
        if answer.error is not None:
            raise TempoQueryError(answer.error.url, answer.error.reason, answer.error.status)
        return answer.data

    def fetch_traces(self, trace_ids: Sequence[str]) -> BackendFetch:
        """The spans of ``trace_ids``, fetched concurrently within the deadline; never raises.

        A trace counts as received only when its answer holds at least one of its
        spans; an empty answer or HTTP 404 is "not found". Traces that failed for the
        same reason share one problem line; a partial trace (too large for Tempo to
        answer whole) is kept, with one line saying so.
        """
        fetch = BackendFetch()
        ids: list[str] = []
        for raw in dict.fromkeys(trace_ids):
            try:
                ids.append(normalize_trace_id(raw))
            except ValueError as error:
                fetch.problems.append(Problem(f"{self.base_url}{TempoAPI.V2.value}",
                                              f"trace not fetched: {error}"))
        failed: dict[str, list[str]] = {}
        for trace_id, answer in self._ask(list(dict.fromkeys(ids))).items():
            reason = self._take(trace_id, answer, fetch)
            if reason:
                failed.setdefault(reason, []).append(trace_id)
        fetch.problems.extend(failure_problems(f"{self.base_url}{(self.api or TempoAPI.V2).value}", failed))
        return fetch

    def search_traces(self, attribute: str, value: str, *, service: str, start_unix_nano: int,
                      end_unix_nano: int, limit: int) -> BackendFetch:
        """Traces of ``service`` with a span whose ``attribute`` is ``value`` in the window; a
        :class:`~memtrace_otel.spans.backend.TraceSearch`.

        A TraceQL search (``GET /api/search?q=...``, ``{"traces": [{"traceID": ...}]}``) names the
        traces, which are then fetched whole. Never raises: a failed search is one problem.
        """
        query = (f"{{ resource.service.name = {_traceql_string(service)} && "
                 f"span.{_traceql_name(attribute)} = {_traceql_string(value)} }}")
        return self._search(query, f"{attribute}={value!r}", start_unix_nano, end_unix_nano, limit)

    def search_failed_evaluations(self, *, service: str, start_unix_nano: int, end_unix_nano: int,
                                  limit: int) -> BackendFetch:
        """Traces of ``service`` holding an evaluation span with ``memtrace.evaluation.passed = false``
        in the window, fetched whole; a :class:`~memtrace_otel.spans.backend.FailureSearch`.

        The attribute is a boolean, so TraceQL compares it with a bare ``false`` (a string ``"false"``
        matches nothing). Never raises: a failed search is one problem.
        """
        query = (f"{{ resource.service.name = {_traceql_string(service)} && "
                 f"span.{_traceql_name(MemTrace.EVALUATION_PASSED)} = false }}")
        return self._search(query, "failed evaluations", start_unix_nano, end_unix_nano, limit)

    def search_evaluator_results(self, name: str, *, service: str, start_unix_nano: int, end_unix_nano: int,
                                 limit: int) -> BackendFetch:
        """Traces of ``service`` with an evaluator's ``gen_ai.evaluation.result`` named ``name`` in the
        window, fetched whole; a :class:`~memtrace_otel.spans.backend.FailureSearch`.

        The name is an attribute of the span's event, so TraceQL reads it in the ``event.`` scope.
        Never raises: a failed search is one problem.
        """
        query = (f"{{ resource.service.name = {_traceql_string(service)} && "
                 f"event.{_traceql_name(GenAI.EVALUATION_NAME)} = {_traceql_string(name)} }}")
        return self._search(query, f"evaluator results {name!r}", start_unix_nano, end_unix_nano, limit)

    def _search(self, query: str, what: str, start_unix_nano: int, end_unix_nano: int,
                limit: int) -> BackendFetch:
        """The traces a TraceQL ``query`` finds in the window, fetched whole; ``what`` names it in errors."""
        fetch = BackendFetch()
        params = {"q": query, "limit": str(limit), "start": str(start_unix_nano // 1_000_000_000),
                  "end": str(-(-end_unix_nano // 1_000_000_000))}
        url = f"{self.base_url}/api/search?{urllib.parse.urlencode(params)}"
        answer = get_json_all({url: url}, self.bounds, thread_name="memtrace-tempo-search")[url]
        found = answer.get("traces") if isinstance(answer, dict) else None
        if isinstance(answer, HTTPFetchError) or not isinstance(found, list):
            reason = (answer.reason if isinstance(answer, HTTPFetchError)
                      else "not a Tempo search answer (no traces list)")
            fetch.problems.append(Problem(url, f"search for {what} failed: {reason}"))
            return fetch
        ids: list[str] = []
        for trace in found:
            raw = trace.get("traceID") if isinstance(trace, dict) else None
            try:
                ids.append(normalize_trace_id(raw))  # type: ignore[arg-type]
            except ValueError:
                fetch.problems.append(Problem(url, f"a found trace has no valid traceID ({raw!r}); skipped"))
        fetched = self.fetch_traces(ids)
        fetched.problems[:0] = fetch.problems
        fetched.limited = len(found) >= limit
        return fetched

    def _ask(self, ids: list[str]) -> dict[str, _Answer]:
        """Each trace id's answer, from the route the server is known to answer.

        While that is not known: v2 first, and v1 for what v2 answered 404, both within
        one deadline.
        """
        if not ids:
            return {}
        until = time.monotonic() + self.bounds.deadline
        api = self.api or TempoAPI.V2
        answers = self._round(ids, api, until)
        if api is TempoAPI.V2 and self.api is None:  # nothing from v2 proved the route exists
            retry = [t for t, a in answers.items() if a.error is not None and a.error.status == _NOT_FOUND]
            answers.update(self._round(retry, TempoAPI.V1, until))
        return answers

    def _round(self, ids: list[str], api: TempoAPI, until: float) -> dict[str, _Answer]:
        if not ids:
            return {}
        urls = {trace_id: self.trace_url(trace_id, api) for trace_id in ids}
        outcomes = get_json_all(urls, self.bounds, until=until, thread_name="memtrace-tempo-query")
        return {trace_id: self._unwrap(url, api, outcomes[trace_id]) for trace_id, url in urls.items()}

    def _unwrap(self, url: str, api: TempoAPI, outcome: Any) -> _Answer:
        if isinstance(outcome, HTTPFetchError):
            return _Answer(url, error=outcome)
        try:
            data, partial = tempo_traces_data(url, outcome)
        except TempoQueryError as error:
            return _Answer(url, error=error)
        with self._lock:  # the first answer in Tempo's shape says which route this server has
            self._api = self._api or api
        return _Answer(url, data, partial)

    def _take(self, trace_id: str, answer: _Answer, fetch: BackendFetch) -> str:
        """Add what one answer holds to ``fetch``; the reason it gave nothing, or ``""``."""
        if answer.error is not None:
            if answer.error.status != _NOT_FOUND:
                return answer.error.reason
            return "not found (HTTP 404)" if self.api else (
                "not found (HTTP 404 from /api/v2/traces and /api/traces: no such trace, or the URL is "
                "not Tempo's HTTP API)")
        problems: list[Problem] = []
        if answer.partial:
            problems.append(Problem(answer.url, f"Tempo answered part of the trace only: {answer.partial}"))
        records = records_from_traces_data(answer.data, answer.url, problems)
        return keep_trace_spans(trace_id, answer.url, records, problems, fetch)


_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _traceql_string(text: str) -> str:
    """A TraceQL string literal: double quotes, with quotes and backslashes escaped.

    >>> print(_traceql_string('a"b'))
    "a\\"b"
    """
    return json.dumps(text, ensure_ascii=False)


def _traceql_name(attribute: str) -> str:
    """An attribute name as TraceQL takes it after a scope (``span.``, ``event.``): bare when it can be,
    else quoted."""
    return attribute if _BARE_NAME.fullmatch(attribute) else _traceql_string(attribute)
