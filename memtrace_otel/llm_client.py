"""The one OpenAI-compatible client of the package: the LLM engines and the benchmark's LLM steps.

Why a wrapper at all: callers need four things the raw client does not
give in one place — configuration from memtrace's environment variables,
bounded retries that also cover *malformed model output* (not only HTTP
errors), token accounting from the API's ``usage``, and instrumentation
suppressed around every call so that the extension never traces itself (an
OpenAI instrumentation in the same process would otherwise record the
engine's own calls as application spans).

Errors never escape as ``openai`` exceptions: a call either returns a
:class:`ChatResult` or raises :class:`LLMError` with a one-line ``reason``,
which the engines turn into ``Attribution.failure_reason``.

Thread safety: one :class:`LLMClient` may be shared by threads; the token
counters are guarded by a lock. The engines use one client per process.
Every call runs under :func:`memtrace_otel.suppress.suppress_instrumentation`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memtrace_otel.config import (
    ENV_OPENAI_API_KEY,
    ENV_OPENAI_API_KEY_FALLBACK,
    ENV_OPENAI_BASE_URL,
    ENV_OPENAI_BASE_URL_FALLBACK,
    ENV_OPENAI_MODEL,
)
from memtrace_otel.extras import missing_extra
from memtrace_otel.suppress import suppress_instrumentation

__all__ = [
    "ChatResult",
    "LLMClient",
    "LLMError",
    "MalformedOutput",
    "ToolCall",
    "check_refusal",
    "estimate_tokens",
    "parse_json_object",
    "suppress_instrumentation",
]

_logger = logging.getLogger(__name__)
_DEFAULT_MODEL = "gpt-4o-mini"
_DEFAULT_TIMEOUT = 60.0
_DEFAULT_ATTEMPTS = 3
_DEFAULT_RETRY_DELAY = 0.5
_LOCAL_KEY = "memtrace-local"  # local OpenAI-compatible servers want *some* key
T = TypeVar("T")

class LLMError(Exception):
    """A call that could not produce usable output; ``reason`` is one line for the report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MalformedOutput(ValueError):
    """The model answered, but not in the shape asked for (bad JSON, unknown id, refusal)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a reply; ``arguments`` is the raw JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ChatResult:
    """One completion: the assistant message and what it cost."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    refusal: str | None = None
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    def assistant_message(self) -> dict[str, Any]:
        """The reply as a message to send back in the next request's history."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


def estimate_tokens(payload: Any, *, chars_per_token: float = 3.0) -> int:
    """A deliberately high guess of a payload's prompt tokens, for budget checks before a call.

    JSON-heavy prompts with hex ids tokenize worse than prose (~3 chars per
    token rather than ~4), so the default errs on the side of stopping early.

    >>> estimate_tokens([{"role": "user", "content": "x" * 30}]) > 10
    True
    """
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return math.ceil(len(text) / chars_per_token)


def _first_env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


class LLMClient:
    """Chat completions against any OpenAI-compatible endpoint.

    Parameters
    ----------
    base_url, model, api_key:
        Default from ``MEMTRACE_OPENAI_BASE_URL`` / ``MEMTRACE_OPENAI_MODEL`` /
        ``MEMTRACE_OPENAI_API_KEY``, falling back to ``OPENAI_BASE_URL`` and
        ``OPENAI_API_KEY``. A base URL without a key gets a placeholder key
        (local servers ignore it).
    timeout:
        Seconds per HTTP request.
    attempts:
        Tries per call for transport failures (timeouts, connection errors,
        5xx/429) and, in :meth:`chat_parsed`, for malformed output.
    retry_delay:
        Pause before a transport retry (doubles each time); 0 in tests.
    http_client:
        An ``httpx`` client for the ``openai`` client (proxies, event hooks).

    Raises
    ------
    ValueError
        A bad constructor argument.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = _DEFAULT_TIMEOUT,
        attempts: int = _DEFAULT_ATTEMPTS,
        retry_delay: float = _DEFAULT_RETRY_DELAY,
        http_client: Any = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        if retry_delay < 0:
            raise ValueError("retry_delay must be >= 0")
        self.base_url = base_url or _first_env(ENV_OPENAI_BASE_URL, ENV_OPENAI_BASE_URL_FALLBACK)
        self.model = model or _first_env(ENV_OPENAI_MODEL) or _DEFAULT_MODEL
        self.api_key = api_key or _first_env(ENV_OPENAI_API_KEY, ENV_OPENAI_API_KEY_FALLBACK)
        if self.api_key is None and self.base_url:
            self.api_key = _LOCAL_KEY
        self.timeout = timeout
        self.attempts = attempts
        self.retry_delay = retry_delay
        self._http_client = http_client
        self._client: Any = None
        self._lock = threading.Lock()
        self.input_tokens = 0
        self.output_tokens = 0
        self.calls = 0

    # -- plumbing ----------------------------------------------------------
    def _openai(self) -> Any:
        # Built on first use so that constructing an engine never needs openai or a key.
        if self._client is None:
            try:
                import openai
            except ImportError as error:
                raise LLMError(missing_extra("the LLM engines (the openai package)", "openai")) from error
            if self.api_key is None:
                raise LLMError(f"no OpenAI endpoint configured: set {ENV_OPENAI_BASE_URL} "
                               f"or {ENV_OPENAI_API_KEY}")
            options: dict[str, Any] = {"api_key": self.api_key, "timeout": self.timeout, "max_retries": 0}
            if self.base_url:
                options["base_url"] = self.base_url
            if self._http_client is not None:
                options["http_client"] = self._http_client
            self._client = openai.OpenAI(**options)
        return self._client

    def _count(self, usage: Any) -> tuple[int, int]:
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0) if usage is not None else 0
        completion = int(getattr(usage, "completion_tokens", 0) or 0) if usage is not None else 0
        with self._lock:
            self.input_tokens += prompt
            self.output_tokens += completion
            self.calls += 1
        return prompt, completion

    def _request(self, request: dict[str, Any]) -> Any:
        client = self._openai()  # first: without the openai package, one line naming the extra
        import openai

        delay = self.retry_delay
        for attempt in range(1, self.attempts + 1):
            try:
                with suppress_instrumentation():
                    return client.chat.completions.create(**request)
            except openai.APITimeoutError:
                reason = f"timeout after {self.timeout:g}s"
            except openai.APIConnectionError as error:
                reason = f"connection error: {error}"
            except openai.APIStatusError as error:
                reason = f"HTTP {error.status_code} from the model endpoint"
                if error.status_code < 500 and error.status_code != 429:
                    raise LLMError(reason) from error
            except (openai.APIError, ValueError) as error:  # e.g. a body that is not JSON
                reason = f"bad response from the model endpoint: {type(error).__name__}"
            if attempt < self.attempts:
                _logger.debug("model call failed (%s); retry %d", reason, attempt)
                time.sleep(delay)
                delay *= 2
        raise LLMError(f"{reason} ({self.attempts} attempts)")

    # -- API ---------------------------------------------------------------
    def chat(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        json_mode: bool = False,
    ) -> ChatResult:
        """One completion; transport failures are retried, then raised as :class:`LLMError`."""
        request: dict[str, Any] = {"model": self.model, "messages": list(messages), "temperature": 0}
        if tools:
            request["tools"] = list(tools)
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        if json_mode:
            request["response_format"] = {"type": "json_object"}
        response = self._request(request)
        prompt, completion = self._count(getattr(response, "usage", None))
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMError("the model endpoint returned no choices")
        message = choices[0].message
        calls = [
            ToolCall(c.id or f"call_{i}", c.function.name or "", c.function.arguments or "")
            for i, c in enumerate(message.tool_calls or ())
            if getattr(c, "function", None) is not None
        ]
        return ChatResult(
            content=message.content,
            tool_calls=calls,
            refusal=getattr(message, "refusal", None),
            finish_reason=choices[0].finish_reason,
            input_tokens=prompt,
            output_tokens=completion,
        )

    def chat_parsed(
        self,
        messages: Sequence[dict[str, Any]],
        parse: Callable[[ChatResult], T],
        *,
        max_tokens: int | None = None,
        json_mode: bool = False,
        on_result: Callable[[ChatResult], None] | None = None,
        before_call: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> T:
        """A completion turned into ``T`` by ``parse``, retrying malformed output.

        ``parse`` raises :class:`MalformedOutput`; the model is then shown its
        reply and the problem and asked again, up to ``attempts`` times, after
        which :class:`LLMError` names the last problem. ``on_result`` sees
        every reply (the engines use it for per-case token accounting);
        ``before_call`` sees every request and may raise :class:`LLMError` to
        stop (a token budget).
        """
        history = list(messages)
        problem = ""
        for _ in range(self.attempts):
            if before_call is not None:
                before_call(history)
            result = self.chat(history, max_tokens=max_tokens, json_mode=json_mode)
            if on_result is not None:
                on_result(result)
            try:
                return parse(result)
            except MalformedOutput as error:
                problem = str(error)
            history = [*list(messages), result.assistant_message(),
                       {"role": "user", "content": f"Your reply was invalid: {problem}. "
                                                   "Answer again in the requested format."}]
            if history[-2]["content"] is None:
                history[-2]["content"] = ""
        raise LLMError(f"malformed model output after {self.attempts} attempts: {problem}")


def check_refusal(result: ChatResult) -> None:
    """Raise :class:`MalformedOutput` when the reply is a refusal rather than an answer."""
    if result.refusal or result.finish_reason == "content_filter":
        raise MalformedOutput(f"the model refused: {(result.refusal or 'content filter')[:120]}")


def parse_json_object(text: str | None) -> dict[str, Any]:
    """The JSON object in a reply, tolerating code fences and prose around it.

    >>> parse_json_object('Sure: ```json\\n{"a": 1}\\n```')
    {'a': 1}
    """
    if not text or not text.strip():
        raise MalformedOutput("empty reply")
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise MalformedOutput("no JSON object in the reply")
    try:
        value = json.loads(text[start:end + 1])
    except json.JSONDecodeError as error:
        raise MalformedOutput(f"bad JSON: {error.msg} at char {error.pos}") from None
    if not isinstance(value, dict):
        raise MalformedOutput("the JSON is not an object")
    return value

