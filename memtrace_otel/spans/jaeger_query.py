"""A client of Jaeger's query HTTP API (``/api/traces``), standard library only.

Why: lineage crosses traces. A graph built from a query trace names the
ingestion traces whose spans produced the memories it read; this client
fetches those traces back from the trace backend so the graph can be rebuilt
whole. It speaks the HTTP JSON API of the Jaeger UI (v1 and v2 servers alike),
so what it parses is exactly a Jaeger UI download.

Every request is bounded (per request, per fetch, in concurrency) and every
failure is one line naming the URL: :mod:`memtrace_otel.spans.http_fetch`,
shared with the Tempo client, says how.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Sequence
from datetime import timedelta
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
)
from memtrace_otel.spans.model import Problem
from memtrace_otel.spans.readers import records_from_document

__all__ = ["JaegerQueryClient", "JaegerQueryError", "normalize_trace_id"]


class JaegerQueryError(HTTPFetchError):
    """A request to the Jaeger query API failed; ``str()`` is one line naming the URL."""


class JaegerQueryClient:
    """Fetches traces from a Jaeger query service; a :class:`~memtrace_otel.spans.backend.TraceBackend`.

    Parameters
    ----------
    base_url:
        The query service, e.g. ``http://127.0.0.1:16686`` (a path prefix is kept).
    timeout:
        Seconds one request may take, from connect to its last byte.
    deadline:
        Seconds one :meth:`fetch_traces` call may take in all.
    concurrency:
        Requests at once.

    Raises
    ------
    ValueError
        A malformed ``base_url`` (not ``http(s)://host[:port]``) or a bound that is not positive.

    Thread-safe: it holds no state between calls.

    >>> JaegerQueryClient("http://127.0.0.1:16686").name
    'Jaeger http://127.0.0.1:16686'
    """

    def __init__(self, base_url: str, *, timeout: float = 10.0, deadline: float = 60.0,
                 concurrency: int = 4) -> None:
        self.base_url = check_base_url(base_url, "Jaeger query URL")
        self.bounds = Bounds(timeout, deadline, concurrency)
        self.timeout, self.deadline, self.concurrency = self.bounds.timeout, self.bounds.deadline, concurrency
        self.name = f"Jaeger {self.base_url}"

    def trace_url(self, trace_id: str) -> str:
        return f"{self.base_url}/api/traces/{normalize_trace_id(trace_id)}"

    def fetch_trace(self, trace_id: str) -> dict[str, Any]:
        """One trace as ``GET /api/traces/{id}`` gives it (``{"data": [trace]}``), savable as a span file.

        Raises
        ------
        ValueError
            A malformed ``trace_id``.
        JaegerQueryError
            The request failed (HTTP 404 when Jaeger does not have the trace) or the answer
            is not a Jaeger query API answer.
        """
        url = self.trace_url(trace_id)
        return _jaeger_answer(url, self._run({url: url})[url])

    def find_traces(self, service: str, limit: int = 20, lookback: float | timedelta = 3600.0, *,
                    operation: str | None = None) -> list[dict[str, Any]]:
        """Recent traces of ``service`` (newest window of ``lookback`` seconds), as Jaeger JSON traces.

        Raises
        ------
        ValueError
            An empty ``service``, ``limit`` < 1 or a non-positive ``lookback``.
        JaegerQueryError
            The request failed.
        """
        seconds = lookback.total_seconds() if isinstance(lookback, timedelta) else float(lookback)
        if not service:
            raise ValueError("service must not be empty")
        if limit < 1 or not seconds > 0:
            raise ValueError("limit must be >= 1 and lookback > 0")
        end = int(time.time() * 1_000_000)  # the server takes a window, not a lookback
        params = {"service": service, "limit": str(limit), "start": str(end - int(seconds * 1_000_000)),
                  "end": str(end)}
        if operation:
            params["operation"] = operation
        url = f"{self.base_url}/api/traces?{urllib.parse.urlencode(params)}"
        return list(_jaeger_answer(url, self._run({url: url})[url])["data"])

    def fetch_traces(self, trace_ids: Sequence[str]) -> BackendFetch:
        """The spans of ``trace_ids``, fetched concurrently within the deadline; never raises.

        A trace counts as received only when its answer holds at least one of its
        spans; an empty answer is "not found". Traces that failed for the same
        reason share one problem line.
        """
        fetch = BackendFetch()
        urls: dict[str, str] = {}
        for raw in dict.fromkeys(trace_ids):
            try:
                urls[normalize_trace_id(raw)] = self.trace_url(raw)
            except ValueError as error:
                fetch.problems.append(Problem(f"{self.base_url}/api/traces", f"trace not fetched: {error}"))
        outcomes = self._run(urls)
        failed: dict[str, list[str]] = {}
        for trace_id, url in urls.items():
            reason = self._take(trace_id, url, outcomes[trace_id], fetch)
            if reason:
                failed.setdefault(reason, []).append(trace_id)
        fetch.problems.extend(failure_problems(f"{self.base_url}/api/traces", failed))
        return fetch

    def search_traces(self, attribute: str, value: str, *, service: str, start_unix_nano: int,
                      end_unix_nano: int, limit: int) -> BackendFetch:
        """Traces of ``service`` with a span tagged ``attribute=value`` in the window (``/api/traces``
        with ``tags``, as the UI's search); a :class:`~memtrace_otel.spans.backend.TraceSearch`.

        Jaeger answers the newest ``limit`` traces whole, so no second request is made. Never raises:
        a failed search is one problem naming the URL.
        """
        fetch = BackendFetch()
        params = {"service": service, "tags": json.dumps({attribute: value}), "limit": str(limit),
                  "start": str(start_unix_nano // 1000), "end": str(-(-end_unix_nano // 1000))}
        url = f"{self.base_url}/api/traces?{urllib.parse.urlencode(params)}"
        try:
            traces = _jaeger_answer(url, self._run({url: url})[url])["data"]
        except JaegerQueryError as error:
            fetch.problems.append(Problem(url, f"search for {attribute}={value!r} failed: {error.reason}"))
            return fetch
        for trace in traces:
            trace_id = trace.get("traceID") if isinstance(trace, dict) else None
            try:
                trace_id = normalize_trace_id(trace_id)  # type: ignore[arg-type]
            except ValueError:
                fetch.problems.append(Problem(url, f"a found trace has no valid traceID ({trace_id!r}); "
                                                   "skipped"))
                continue
            problems: list[Problem] = []
            records = records_from_document({"data": [trace]}, url, problems)
            keep_trace_spans(trace_id, url, records, problems, fetch)
        fetch.limited = len(traces) >= limit
        return fetch

    def search_failed_evaluations(self, *, service: str, start_unix_nano: int, end_unix_nano: int,
                                  limit: int) -> BackendFetch:
        """Traces of ``service`` holding an evaluation span with ``memtrace.evaluation.passed = false``
        in the window, whole; a :class:`~memtrace_otel.spans.backend.FailureSearch`.

        Jaeger's tag search compares a boolean tag by its text, so ``"false"`` finds it. Never raises.
        """
        return self.search_traces(MemTrace.EVALUATION_PASSED, "false", service=service,
                                  start_unix_nano=start_unix_nano, end_unix_nano=end_unix_nano, limit=limit)

    def search_evaluator_results(self, name: str, *, service: str, start_unix_nano: int, end_unix_nano: int,
                                 limit: int) -> BackendFetch:
        """Traces of ``service`` with an evaluator's ``gen_ai.evaluation.result`` named ``name`` in the
        window, whole; a :class:`~memtrace_otel.spans.backend.FailureSearch`.

        An event's attributes are a span log's fields in Jaeger, and its tag search matches those too
        (span tags, process tags and log fields), so the evaluation's name finds the span it is on.
        Never raises.
        """
        return self.search_traces(GenAI.EVALUATION_NAME, name, service=service,
                                  start_unix_nano=start_unix_nano, end_unix_nano=end_unix_nano, limit=limit)

    def _take(self, trace_id: str, url: str, outcome: Any, fetch: BackendFetch) -> str:
        """Add what one answer holds to ``fetch``; the reason it gave nothing, or ``""``."""
        try:
            document = _jaeger_answer(url, outcome)
        except JaegerQueryError as error:
            return error.reason
        problems: list[Problem] = []
        records = records_from_document(document, url, problems)
        return keep_trace_spans(trace_id, url, records, problems, fetch)

    def _run(self, urls: dict[str, str]) -> dict[str, Any]:
        """GET each URL (keyed), ``concurrency`` at a time; each key's JSON or its error."""
        return get_json_all(urls, self.bounds, thread_name="memtrace-jaeger-query")


def _jaeger_answer(url: str, outcome: Any) -> dict[str, Any]:
    if isinstance(outcome, HTTPFetchError):
        raise JaegerQueryError(outcome.url, outcome.reason, outcome.status)
    if not isinstance(outcome, dict) or not isinstance(outcome.get("data"), list):
        raise JaegerQueryError(url, "not a Jaeger query API answer (no data list)")
    return outcome
