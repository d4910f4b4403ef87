"""A small client of Jaeger's query HTTP API (``/api/traces``), standard library only.

Why: lineage crosses traces. A graph built from a query trace names, in
``G.graph["missing_traces"]``, the ingestion traces whose spans produced the
memories it read; this client fetches those traces back from the trace
backend so the graph can be rebuilt whole. It speaks the same HTTP JSON API
as the Jaeger UI (v1 and v2 servers alike), so what it parses is exactly a
Jaeger UI download.

Every failure (HTTP error, timeout, refused connection, non-JSON, wrong
shape) becomes a :class:`JaegerQueryError` whose message is one line naming
the URL. :func:`fetch_traces_as_records` never raises for one bad trace: it
records a :class:`~memtrace_otel.spans.Problem` and goes on with the rest.

Loopback servers are reached directly, never through an ``*_proxy``
environment setting, so tests against a local Jaeger never leave the machine.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from memtrace_otel.spans.model import Problem
from memtrace_otel.spans.readers import SpanReadResult, records_from_document

__all__ = [
    "DEFAULT_TIMEOUT",
    "JaegerQueryError",
    "fetch_trace",
    "fetch_traces_as_records",
    "find_traces",
    "normalize_trace_id",
]

DEFAULT_TIMEOUT = 10.0
"""Seconds to wait for one answer of the query service."""
_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_DEFAULT = urllib.request.build_opener()


class JaegerQueryError(RuntimeError):
    """A request to the Jaeger query API failed; ``str()`` is one line naming the URL."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"GET {url}: {reason}")
        self.url = url
        self.reason = reason


def normalize_trace_id(trace_id: str) -> str:
    """The 32-hex-digit lowercase form of a trace id (Jaeger may print it shorter).

    >>> normalize_trace_id("ABC")
    '00000000000000000000000000000abc'

    Raises
    ------
    ValueError
        When ``trace_id`` is not 1-32 hex digits or is all zeros.
    """
    text = trace_id.strip() if isinstance(trace_id, str) else ""
    if not 0 < len(text) <= 32 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise ValueError(f"trace id {str(trace_id)[:40]!r} is not 1-32 hex digits")
    if int(text, 16) == 0:
        raise ValueError("trace id is all zeros")
    return text.lower().rjust(32, "0")


def _base(base_url: str) -> str:
    parsed = urllib.parse.urlsplit(base_url)
    # Only HTTP(S): urllib would happily open file:// or ftp:// URLs handed in by a user.
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"Jaeger query URL {base_url!r} is not an http(s)://host:port URL")
    return base_url.rstrip("/")


def _opener(url: str) -> urllib.request.OpenerDirector:
    host = urllib.parse.urlsplit(url).hostname or ""
    return _DIRECT if host in _LOOPBACK or host.startswith("127.") else _DEFAULT


def _error_detail(body: bytes) -> str:
    # Jaeger answers errors as {"errors": [{"code": 404, "msg": "trace not found"}]}.
    try:
        errors = json.loads(body).get("errors") or []
        messages = [str(e.get("msg", "")) for e in errors if isinstance(e, dict)]
    except (ValueError, AttributeError):
        messages = [body[:200].decode("utf-8", "replace")]
    return " ".join("; ".join(m for m in messages if m).split())


def _get_json(url: str, timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with _opener(url).open(request, timeout=timeout) as response:
            body = response.read(_MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as error:
        try:
            detail = _error_detail(error.read(4096))
        except (OSError, http.client.HTTPException):
            detail = ""
        raise JaegerQueryError(url, f"HTTP {error.code} {error.reason}"
                               + (f": {detail}" if detail else "")) from None
    except TimeoutError:
        raise JaegerQueryError(url, f"no answer within {timeout:g} s") from None
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError):
            raise JaegerQueryError(url, f"no answer within {timeout:g} s") from None
        raise JaegerQueryError(url, f"cannot connect ({error.reason})") from None
    except (OSError, ValueError, http.client.HTTPException) as error:
        raise JaegerQueryError(url, f"{type(error).__name__}: {error}") from None
    if len(body) > _MAX_RESPONSE_BYTES:
        raise JaegerQueryError(url, f"response larger than {_MAX_RESPONSE_BYTES} bytes")
    try:
        document = json.loads(body)
    except ValueError as error:
        raise JaegerQueryError(url, f"response is not JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise JaegerQueryError(url, "not a Jaeger query API answer (no data list)")
    return document


def fetch_trace(base_url: str, trace_id: str, *, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """One trace as Jaeger's ``GET /api/traces/{id}`` gives it (``{"data": [trace]}``).

    Parameters
    ----------
    base_url:
        The query service, e.g. ``http://127.0.0.1:16686``.
    trace_id:
        Hex trace id (any case, leading zeros optional).

    Returns
    -------
    dict
        The JSON document, readable by :func:`~memtrace_otel.spans.readers.records_from_document`
        and savable as a file for :func:`~memtrace_otel.spans.read_span_files`.

    Raises
    ------
    ValueError
        A malformed ``base_url`` or ``trace_id``.
    JaegerQueryError
        The request failed (HTTP 404 when Jaeger does not have the trace).
    """
    url = f"{_base(base_url)}/api/traces/{normalize_trace_id(trace_id)}"
    return _get_json(url, timeout)


def find_traces(
    base_url: str,
    service: str,
    limit: int = 20,
    lookback: float | timedelta = 3600.0,
    *,
    operation: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> list[dict[str, Any]]:
    """Recent traces of ``service`` (newest window of ``lookback`` seconds), as Jaeger JSON traces.

    The server takes a time window, not a lookback, so the window is computed
    here from the local clock, as the Jaeger UI does.

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
    if limit < 1 or seconds <= 0:
        raise ValueError("limit must be >= 1 and lookback > 0")
    end = int(time.time() * 1_000_000)
    params = {"service": service, "limit": str(limit), "start": str(end - int(seconds * 1_000_000)),
              "end": str(end)}
    if operation:
        params["operation"] = operation
    url = f"{_base(base_url)}/api/traces?{urllib.parse.urlencode(params)}"
    return list(_get_json(url, timeout)["data"])


def fetch_traces_as_records(
    base_url: str, trace_ids: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT
) -> SpanReadResult:
    """Fetch traces and read their spans, as :func:`~memtrace_otel.spans.read_span_files` would.

    A trace that cannot be fetched or read becomes one problem naming its
    URL; the other traces are still read. Typical use completes a graph::

        extra = fetch_traces_as_records(url, G.graph["missing_traces"])
        G = build_graph([*spans, *extra.spans])

    Raises
    ------
    ValueError
        A malformed ``base_url`` (a malformed trace id is a problem, not an error).
    """
    base = _base(base_url)
    result = SpanReadResult()
    for raw_id in dict.fromkeys(trace_ids):
        where = f"{base}/api/traces/{raw_id}"
        try:
            document = fetch_trace(base, raw_id, timeout=timeout)
        except JaegerQueryError as error:
            result.problems.append(Problem(error.url, f"trace not fetched: {error.reason}"))
            continue
        except ValueError as error:
            result.problems.append(Problem(where, f"trace not fetched: {error}"))
            continue
        result.add(records_from_document(document, where, result.problems))
    return result
