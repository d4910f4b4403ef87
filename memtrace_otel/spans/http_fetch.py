"""Bounded, concurrent HTTP GETs of JSON documents: what the trace-backend clients share.

Why: a backend's query API (Jaeger's, Tempo's) is asked for many traces at
once, from a CLI or from a long-running service, and must never hang either.
Standard library only.

Every request is bounded: ``timeout`` caps one request from connect to last
byte (a server dripping a byte every few seconds included), ``deadline`` caps
a whole :func:`get_json_all` (or several sharing one ``until``), and at most
``concurrency`` requests run at once. A request past its bound is ended by
shutting its socket down from the watching thread, wherever it is blocked.

Every failure (HTTP error, timeout, refused connection, redirect loop, bad
status line, non-JSON) is an :class:`HTTPFetchError` whose ``str()`` is one
line naming the URL. Loopback servers are reached directly, never through an
``*_proxy`` environment setting, so tests against a local backend never leave
the machine; other hosts honour the proxy settings.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from memtrace_otel.spans.anyvalue import brief
from memtrace_otel.spans.backend import BackendFetch
from memtrace_otel.spans.model import Problem, SpanRecord

try:  # orjson bounds nesting (1024) without recursing; json would raise RecursionError
    from orjson import JSONDecodeError as _JSONError
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    _JSONError = ValueError  # type: ignore[assignment,misc]
    _loads = json.loads  # type: ignore[assignment]

__all__ = [
    "Bounds",
    "HTTPFetchError",
    "check_base_url",
    "failure_problems",
    "get_json_all",
    "keep_trace_spans",
    "normalize_trace_id",
    "one_line",
]

_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
_MAX_ERROR_BYTES = 4096
_MAX_REDIRECTS = 3
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}
_GRACE_SECONDS = 1.0  # after the deadline, how long aborted requests get to wind down
_IDS_IN_MESSAGE = 3


class HTTPFetchError(RuntimeError):
    """A GET failed; ``str()`` is one line naming the URL, ``status`` the HTTP status if one came back."""

    def __init__(self, url: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"GET {url}: {reason}")
        self.url = url
        self.reason = reason
        self.status = status


def normalize_trace_id(trace_id: str) -> str:
    """The 32-hex-digit lowercase form of a trace id (backends may print it shorter).

    >>> normalize_trace_id("ABC")
    '00000000000000000000000000000abc'

    Raises
    ------
    ValueError
        When ``trace_id`` is not 1-32 hex digits or is all zeros.
    """
    text = trace_id.strip() if isinstance(trace_id, str) else ""
    if not 0 < len(text) <= 32 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise ValueError(f"trace id {brief(trace_id)} is not 1-32 hex digits")
    if int(text, 16) == 0:
        raise ValueError("trace id is all zeros")
    return text.lower().rjust(32, "0")


def check_base_url(base_url: Any, label: str) -> str:
    """``base_url`` without its trailing ``/``, when it is an ``http(s)://host[:port][/prefix]`` URL.

    >>> check_base_url("http://127.0.0.1:3200/", "Tempo query URL")
    'http://127.0.0.1:3200'

    Raises
    ------
    ValueError
        Naming ``label`` and what is wrong: not a string, spaces or control characters, another
        scheme, no host, a bad port, a query or a fragment.
    """
    if not isinstance(base_url, str) or any(ord(c) <= 32 or ord(c) == 127 for c in base_url):
        raise ValueError(f"{label} {brief(base_url)} is not a URL (empty, or spaces or control "
                         "characters in it)")
    parsed = urllib.parse.urlsplit(base_url)
    # Only HTTP(S): urllib would happily open file:// or ftp:// URLs handed in by a user.
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"{label} {base_url!r} is not an http(s)://host:port URL")
    try:
        parsed.port  # noqa: B018 - parsing it is the check
    except ValueError as error:
        raise ValueError(f"{label} {base_url!r} has a bad port ({error})") from None
    if parsed.query or parsed.fragment:
        raise ValueError(f"{label} {base_url!r} must not have a query or fragment")
    return base_url.rstrip("/")


@dataclass(frozen=True)
class Bounds:
    """How long one request and one whole fetch may take, and how many requests run at once.

    Raises
    ------
    ValueError
        A bound that is not positive (or not finite).

    >>> Bounds(timeout=2).deadline
    60.0
    """

    timeout: float = 10.0
    deadline: float = 60.0
    concurrency: int = 4

    def __post_init__(self) -> None:
        for label, value in (("timeout", self.timeout), ("deadline", self.deadline)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                    or value == float("inf"):
                raise ValueError(f"{label} must be a positive number of seconds, not {value!r}")
        concurrency = self.concurrency
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, not {self.concurrency!r}")
        object.__setattr__(self, "timeout", float(self.timeout))
        object.__setattr__(self, "deadline", float(self.deadline))


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    return host in _LOOPBACK or host.startswith("127.")


class _Abort:
    """Ends one request from another thread by shutting its sockets down. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.reason = ""

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            aborted = bool(self.reason)
        if aborted:  # ended while this connection was being opened
            _shut(sock)

    def abort(self, reason: str) -> None:
        with self._lock:
            if self.reason:
                return
            self.reason = reason
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv, unlike close()


class _WatchedHTTP(http.client.HTTPConnection):
    aborter: _Abort

    def connect(self) -> None:
        super().connect()
        self.aborter.watch(self.sock)


class _WatchedHTTPS(http.client.HTTPSConnection):
    aborter: _Abort

    def connect(self) -> None:
        super().connect()
        self.aborter.watch(self.sock)


def _factory(cls: type[http.client.HTTPConnection], aborter: _Abort) -> Callable[..., Any]:
    def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        connection = cls(host, **kwargs)
        connection.aborter = aborter  # type: ignore[attr-defined]
        return connection
    return make


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, aborter: _Abort) -> None:
        super().__init__()
        self._make = _factory(_WatchedHTTP, aborter)

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._make, req)  # type: ignore[arg-type]


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, aborter: _Abort) -> None:
        super().__init__()
        self._make = _factory(_WatchedHTTPS, aborter)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._make, req, context=self._context)  # type: ignore[arg-type,attr-defined]


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = _MAX_REDIRECTS

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise urllib.error.HTTPError(req.full_url, code, "redirect to a non-HTTP URL refused", headers,
                                         fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(url: str, aborter: _Abort) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [_HTTPHandler(aborter), _HTTPSHandler(aborter), _Redirects()]
    if _is_loopback(url):
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


def one_line(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters, unprintable characters and runs of blanks made one space."""
    cleaned = "".join(c if c.isprintable() else " " for c in text[:limit])
    return " ".join(cleaned.split())


def _error_detail(body: bytes) -> str:
    # Jaeger answers errors as {"errors": [{"code": 404, "msg": "trace not found"}]}, Tempo as plain
    # text; anything else (an "errors" that is not a list, a nested body, HTML) is a short line of text.
    try:
        errors = _loads(body).get("errors")
    except (_JSONError, AttributeError, TypeError):
        errors = None
    if isinstance(errors, list):
        messages = [e["msg"] for e in errors if isinstance(e, dict) and isinstance(e.get("msg"), str)]
        if messages:
            return one_line("; ".join(messages))
    return one_line(body.decode("utf-8", "replace"))


def _http_error(error: urllib.error.HTTPError) -> str:
    if 300 <= error.code < 400:
        return f"HTTP {error.code}: too many redirects or a redirect loop"
    try:
        detail = _error_detail(error.read(_MAX_ERROR_BYTES))
    except (OSError, http.client.HTTPException):
        detail = ""
    reason = one_line(str(error.reason), 80)
    return f"HTTP {error.code} {reason}" + (f": {detail}" if detail else "")


def _get_json(url: str, timeout: float, aborter: _Abort) -> Any:
    """The JSON document at ``url``; raises :class:`HTTPFetchError` with one line of reason."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with _opener(url, aborter).open(request, timeout=timeout) as response:
            body = response.read(_MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as error:
        status = None if aborter.reason else error.code
        raise HTTPFetchError(url, aborter.reason or _http_error(error), status) from None
    except urllib.error.URLError as error:
        if aborter.reason or isinstance(error.reason, TimeoutError):
            raise HTTPFetchError(url, aborter.reason or f"no complete answer within {timeout:g} s") from None
        raise HTTPFetchError(url, f"cannot connect ({one_line(str(error.reason), 120)})") from None
    except TimeoutError:
        raise HTTPFetchError(url, aborter.reason or f"no complete answer within {timeout:g} s") from None
    except (OSError, ValueError, http.client.HTTPException) as error:
        reason = aborter.reason or f"{type(error).__name__}: {one_line(str(error), 120)}"
        raise HTTPFetchError(url, reason) from None
    if aborter.reason:  # a body cut short by the watchdog can still look complete
        raise HTTPFetchError(url, aborter.reason)
    if len(body) > _MAX_RESPONSE_BYTES:
        raise HTTPFetchError(url, f"response larger than {_MAX_RESPONSE_BYTES:,} bytes")
    try:
        return _loads(body)
    except (_JSONError, RecursionError) as error:
        raise HTTPFetchError(url, f"response is not JSON ({one_line(str(error), 120)})") from None


def get_json_all(urls: Mapping[str, str], bounds: Bounds, *, until: float | None = None,
                 thread_name: str = "memtrace-http") -> dict[str, Any]:
    """GET each URL (keyed), ``bounds.concurrency`` at a time; each key's JSON or its :class:`HTTPFetchError`.

    Parameters
    ----------
    urls:
        Key -> URL; the answer has the same keys.
    bounds:
        Per-request timeout, overall deadline, concurrency.
    until:
        ``time.monotonic()`` by which every request must be over (default: now + ``bounds.deadline``);
        callers that fetch in several rounds pass one ``until`` to all of them.
    thread_name:
        Prefix of the worker threads' names.

    Returns
    -------
    dict
        Never raises for a failed request: its value is the error.
    """
    if not urls:
        return {}
    watch = _Watch(bounds, time.monotonic() + bounds.deadline if until is None else until)
    pool = ThreadPoolExecutor(max_workers=min(bounds.concurrency, len(urls)), thread_name_prefix=thread_name)
    try:
        futures = {pool.submit(watch.get, url, key): key for key, url in urls.items()}
        return watch.collect(futures, urls)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


class _Watch:
    """Runs requests under a per-request timeout and an overall deadline, watched from the calling thread.

    Thread-safe where it must be: workers only add their own entries to ``started`` and
    ``aborters``; the watching thread reads snapshots of them.
    """

    def __init__(self, bounds: Bounds, until: float) -> None:
        self.timeout = bounds.timeout
        self.deadline = until
        self.late = f"no answer within the overall deadline of {bounds.deadline:g} s"
        self.started: dict[str, float] = {}
        self.aborters: dict[str, _Abort] = {}

    def get(self, url: str, key: str) -> Any:
        aborter = self.aborters.setdefault(key, _Abort())
        self.started[key] = now = time.monotonic()
        if now >= self.deadline:
            raise HTTPFetchError(url, self.late)
        return _get_json(url, min(self.timeout, self.deadline - now), aborter)

    def collect(self, futures: dict[Future[Any], str], urls: Mapping[str, str]) -> dict[str, Any]:
        outcomes: dict[str, Any] = {}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=self._next_check(), return_when=FIRST_COMPLETED)
            for future in done:
                outcomes[futures[future]] = self._outcome(future, urls[futures[future]])
            if pending and time.monotonic() >= self.deadline + _GRACE_SECONDS:
                break  # stuck beyond reach (a slow name lookup): give up on them
            self._abort_overdue()
        for future in pending:
            outcomes[futures[future]] = HTTPFetchError(urls[futures[future]], self.late)
        return outcomes

    def _next_check(self) -> float:
        now = time.monotonic()
        dues = [start + self.timeout for key, start in list(self.started.items())
                if not self.aborters[key].reason]
        return max(0.0, min([*dues, self.deadline + (_GRACE_SECONDS if now >= self.deadline else 0)]) - now)

    def _abort_overdue(self) -> None:
        now = time.monotonic()
        for key, start in list(self.started.items()):
            if now >= self.deadline:
                self.aborters[key].abort(self.late)
            elif now - start >= self.timeout:
                self.aborters[key].abort(f"no complete answer within {self.timeout:g} s")

    def _outcome(self, future: Future[Any], url: str) -> Any:
        if future.cancelled():
            return HTTPFetchError(url, self.late)
        error = future.exception()
        if error is None:
            return future.result()
        if isinstance(error, HTTPFetchError):
            return error
        return HTTPFetchError(url, f"{type(error).__name__}: {one_line(str(error), 120)}")


def keep_trace_spans(trace_id: str, url: str, records: Iterable[SpanRecord], problems: list[Problem],
                     fetch: BackendFetch) -> str:
    """Add the spans of ``trace_id`` among ``records`` (read from ``url``) to ``fetch``.

    Spans of other traces are left out with one problem. Returns why nothing was
    received (``problems`` then stay out of ``fetch``), or ``""``.

    >>> fetch = BackendFetch()
    >>> keep_trace_spans("a" * 32, "u", [SpanRecord("a" * 32, "1" * 16, "s")], [], fetch)
    ''
    >>> sorted(fetch.received) == ["a" * 32]
    True
    """
    records = list(records)
    spans = [r for r in records if r.trace_id == trace_id]
    if len(spans) < len(records):
        problems.append(Problem(url, f"answer holds {len(records) - len(spans)} span(s) of other traces; "
                                     "ignored"))
    if not spans:
        return f"answer not understood ({problems[0].message}; {len(problems)} problem(s))" \
            if problems else "not found (empty answer)"
    fetch.spans.extend(spans)
    fetch.received.add(trace_id)
    fetch.problems.extend(problems)
    return ""


def failure_problems(where: str, failed: Mapping[str, list[str]]) -> list[Problem]:
    """One :class:`Problem` per reason in ``failed`` (reason -> trace ids), naming a few of its traces.

    ``where`` is the URL of the traces collection (``.../api/traces``); a lone trace's
    line names its own URL.

    >>> for line in failure_problems("http://j/api/traces", {"HTTP 500": ["a", "b"], "x": ["c"]}):
    ...     print(line)
    http://j/api/traces: 2 traces not fetched (a, b): HTTP 500
    http://j/api/traces/c: trace not fetched: x
    """
    lines = []
    for reason, ids in failed.items():
        if len(ids) == 1:
            lines.append(Problem(f"{where}/{ids[0]}", f"trace not fetched: {reason}"))
            continue
        shown = ", ".join(ids[:_IDS_IN_MESSAGE]) + (", ..." if len(ids) > _IDS_IN_MESSAGE else "")
        lines.append(Problem(where, f"{len(ids)} traces not fetched ({shown}): {reason}"))
    return lines
