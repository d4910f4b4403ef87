"""A scripted OpenAI-compatible HTTP server: the only stand-in for an LLM in the tests.

Why: no model API is reachable here, yet the LLM engines must be tested
through the real ``openai`` client (HTTP, JSON, tool calls, usage, timeouts).
The server speaks ``POST /v1/chat/completions`` on ``127.0.0.1:<free port>``
from a daemon thread (stdlib ``http.server``), answers with what a *script*
says, and records every request it got. ``POST /v1/embeddings`` answers
deterministic vectors (:func:`embed`), outside the script.

A script is either a queue of :class:`Reply` (one per request, in order) or
a callable ``(request_body) -> Reply``. Replies can be text, tool calls, a
refusal, a body that is not JSON, an HTTP error, and can be delayed (to make
the client time out); a delayed reply is released at :meth:`close` so the
thread never outlives the test.

:class:`OraclePolicy` plays the agent's side deterministically from a hint
(the root-cause alias and error type per question) to exercise the plumbing
and measure tokens; it is not a model and makes no accuracy claim.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OraclePolicy", "Reply", "ScriptedOpenAIServer", "count_tokens", "embed", "embeddings_response"]


def count_tokens(payload: Any) -> int:
    """The server's deterministic token count: one token per 4 characters of JSON."""
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return max(1, math.ceil(len(text) / 4))


@dataclass
class Reply:
    """One scripted answer."""

    content: str | None = None
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    refusal: str | None = None
    raw_body: str | None = None
    status: int = 200
    delay: float = 0.0
    usage: tuple[int, int] | None = None

    @classmethod
    def text(cls, content: str, **options: Any) -> Reply:
        return cls(content=content, **options)

    @classmethod
    def json(cls, value: Any, **options: Any) -> Reply:
        return cls(content=json.dumps(value), **options)

    @classmethod
    def tools(cls, *calls: tuple[str, Any], **options: Any) -> Reply:
        """Tool calls ``(name, arguments)``; a ``str`` argument is sent as is (malformed JSON)."""
        return cls(tool_calls=list(calls), **options)

    @classmethod
    def refuse(cls, why: str = "I can't help with that.") -> Reply:
        return cls(refusal=why)

    @classmethod
    def broken(cls, body: str = "{not json", status: int = 200) -> Reply:
        return cls(raw_body=body, status=status)


Script = Callable[[dict[str, Any]], Reply]


class ScriptedOpenAIServer:
    """The server; use as a context manager. ``base_url`` ends in ``/v1``.

    Thread-safe: requests are recorded under a lock; the script is called
    under the same lock, so a stateful callable needs no locking of its own.
    """

    def __init__(self, script: Script | Iterable[Reply], *, model: str = "scripted") -> None:
        self._queue: deque[Reply] | None = None
        if callable(script):
            self._script: Script | None = script
        else:
            self._script, self._queue = None, deque(script)
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        # A short poll interval: close() (shutdown) waits for one poll, and tests close often.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        name="scripted-openai", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            if self._queue is None:
                raise RuntimeError("this server is scripted by a callable")
            self._queue.extend(replies)

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self._script is not None:
                return self._script(body)
            assert self._queue is not None
            if not self._queue:
                return Reply(status=500, raw_body='{"error": {"message": "script exhausted"}}')
            return self._queue.popleft()

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": reply.refusal}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{len(self.requests)}_{i}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
        prompt, completion = reply.usage or (
            count_tokens([body.get("messages"), body.get("tools")]), count_tokens(message))
        return {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

            def do_POST(self) -> None:
                if self.path.rstrip("/") == "/v1/embeddings":
                    return self._embeddings()
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, '{"error": {"message": "not found"}}')
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    return self._send(400, '{"error": {"message": "bad JSON"}}')
                reply = server._next(body)
                if reply.delay and server._release.wait(reply.delay):
                    return None  # closing: drop the connection
                if reply.raw_body is not None:
                    return self._send(reply.status, reply.raw_body)
                return self._send(reply.status, json.dumps(server._completion(body, reply)))

            def _embeddings(self) -> None:
                # Deterministic vectors, apart from the chat script: embeddings never consume a Reply.
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    return self._send(400, '{"error": {"message": "bad JSON"}}')
                with server._lock:
                    server.embedding_requests.append(body)
                return self._send(200, json.dumps(embeddings_response(body)))

            def _send(self, status: int, text: str) -> None:
                data = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

        return Handler


EMBEDDING_DIMENSIONS = 8


def embed(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """The server's deterministic embedding of ``text``: unit-length, from a hash of its words."""
    vector = [0.0] * dimensions
    for word in text.lower().split():
        digest = hashlib.blake2b(word.encode(), digest_size=dimensions).digest()
        for i, byte in enumerate(digest):
            vector[i] += byte / 255.0 - 0.5
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def embeddings_response(body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/embeddings``: one vector per input string (``input`` is a string or a list)."""
    raw = body.get("input")
    inputs = [raw] if isinstance(raw, str) else [str(item) for item in raw or ()]
    return {
        "object": "list", "model": body.get("model", "scripted-embedding"),
        "data": [{"object": "embedding", "index": i, "embedding": embed(text)}
                 for i, text in enumerate(inputs)],
        "usage": {"prompt_tokens": count_tokens(inputs), "total_tokens": count_tokens(inputs)},
    }


_QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)
_FRONTIER = re.compile(r"^Frontier \(expand next, earliest first\): (.*)$", re.MULTILINE)
_UNJUDGED = re.compile(r"^Operations seen, not yet judged: (.*)$", re.MULTILINE)
_JUDGED_FAULTY = re.compile(r"\b(op\d+) FAULTY\b")
_ALIAS = re.compile(r"\bop\d+\b")


class OraclePolicy:
    """Plays the LLM for the three engines from ``hints``: question -> (op alias, error type).

    For ``llm-agent`` it behaves like a diligent investigator: expand the
    earliest frontier variable, judge every operation it has been shown
    (faulty iff it is the hinted one), and answer once the hinted operation
    has been judged faulty; with an empty frontier it answers the earliest
    operation it saw. For the one-prompt engines it answers the hint when
    the hinted alias is in the prompt, else the first alias shown.
    """

    def __init__(self, hints: dict[str, tuple[str, str]]) -> None:
        self.hints = hints

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or []
        text = "\n".join(m.get("content") or "" for m in messages if isinstance(m, dict))
        question = _QUESTION.search(text)
        hint = self.hints.get(question.group(1).strip() if question else "", ("", "ResponseError"))
        if body.get("tools"):
            return self._agent(messages, hint)
        return self._one_prompt(text, hint)

    def _one_prompt(self, text: str, hint: tuple[str, str]) -> Reply:
        aliases = _ALIAS.findall(text)
        op = hint[0] if hint[0] in aliases else (aliases[0] if aliases else "op0")
        return Reply.json({"operation": op, "error_type": hint[1], "confidence": 0.9,
                           "explanation": f"{op} lost the information (oracle stand-in)."})

    def _agent(self, messages: list[dict[str, Any]], hint: tuple[str, str]) -> Reply:
        state = messages[-1].get("content") or ""
        unjudged = _listed(_UNJUDGED, state)
        if _JUDGED_FAULTY.search(state) and hint[0] in _JUDGED_FAULTY.findall(state):
            return self._final(hint[0], hint[1])
        if unjudged:
            return Reply.tools(*(("judge_operation", {"op_id": op, "faulty": op == hint[0],
                                                      "reason": "oracle stand-in"}) for op in unjudged))
        frontier = _listed(_FRONTIER, state)
        if frontier:
            return Reply.tools(("expand", {"variable_id": frontier[0]}))
        seen = sorted(set(_ALIAS.findall(state)), key=lambda a: int(a[2:]))
        return self._final(seen[0] if seen else "op0", hint[1])

    @staticmethod
    def _final(op: str, error_type: str) -> Reply:
        return Reply.tools(("final_answer", {"op_id": op, "error_type": error_type, "confidence": 0.9,
                                             "explanation": f"{op} lost the information (oracle stand-in)."}))


def _listed(pattern: re.Pattern[str], text: str) -> list[str]:
    found = pattern.search(text)
    if not found or found.group(1).startswith("("):
        return []
    return [item.strip() for item in found.group(1).split(",") if item.strip()]
