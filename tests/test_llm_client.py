"""LLMClient through the real openai client against the scripted server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from opentelemetry import context as otel_context

from memtrace_otel.config import ENV_OPENAI_API_KEY, ENV_OPENAI_BASE_URL, ENV_OPENAI_MODEL
from memtrace_otel.llm_client import (
    ChatResult,
    LLMClient,
    LLMError,
    MalformedOutput,
    check_refusal,
    parse_json_object,
    suppress_instrumentation,
)

from openai_server import Reply, ScriptedOpenAIServer

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def clean_openai_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (ENV_OPENAI_BASE_URL, ENV_OPENAI_MODEL, ENV_OPENAI_API_KEY, "OPENAI_BASE_URL",
                 "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    yield


def client_for(server: ScriptedOpenAIServer, **options: Any) -> LLMClient:
    options.setdefault("retry_delay", 0)
    options.setdefault("timeout", 10)
    return LLMClient(base_url=server.base_url, model="test-model", **options)


def test_chat_returns_text_tool_calls_and_counts_usage() -> None:
    replies = [Reply.text("hi", usage=(11, 3)),
               Reply.tools(("expand", {"variable_id": "m@1"}), usage=(20, 5))]
    with ScriptedOpenAIServer(replies) as server:
        client = client_for(server)
        first = client.chat(USER, max_tokens=50)
        second = client.chat(USER, tools=[{"type": "function", "function": {"name": "expand"}}])
    assert first.content == "hi" and (first.input_tokens, first.output_tokens) == (11, 3)
    assert second.tool_calls[0].name == "expand"
    assert second.tool_calls[0].arguments == '{"variable_id": "m@1"}'
    assert (client.input_tokens, client.output_tokens, client.calls) == (31, 8, 2)
    assert server.requests[0]["model"] == "test-model"
    assert server.requests[0]["max_tokens"] == 50
    assert server.requests[1]["tools"][0]["function"]["name"] == "expand"


def test_calls_run_with_instrumentation_suppressed() -> None:
    seen: list[object] = []

    def hook(request: Any) -> None:  # runs in the caller's thread and context
        seen.append(otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY))

    http_client = httpx2.Client(event_hooks={"request": [hook]})
    with ScriptedOpenAIServer([Reply.text("ok")]) as server:
        client_for(server, http_client=http_client).chat(USER)
    assert seen == [True]
    assert otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY) is None
    with suppress_instrumentation():
        assert otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY) is True


def test_timeout_is_retried_then_reported() -> None:
    slow = [Reply.text("late", delay=30), Reply.text("late", delay=30)]
    with ScriptedOpenAIServer(slow) as server:
        client = client_for(server, timeout=0.2, attempts=2)
        with pytest.raises(LLMError, match=r"timeout after 0\.2s \(2 attempts\)"):
            client.chat(USER)
        assert len(server.requests) == 2
    assert client.input_tokens == 0


def test_server_error_is_retried_and_client_error_is_not() -> None:
    replies = [Reply(status=500, raw_body='{"error": {"message": "boom"}}'), Reply.text("fine")]
    with ScriptedOpenAIServer(replies) as server:
        assert client_for(server).chat(USER).content == "fine"
        assert len(server.requests) == 2
    with ScriptedOpenAIServer([Reply(status=400, raw_body='{"error": {"message": "no"}}')]) as server:
        with pytest.raises(LLMError, match="HTTP 400"):
            client_for(server).chat(USER)
        assert len(server.requests) == 1


def test_a_body_that_is_not_json_becomes_an_llm_error() -> None:
    with ScriptedOpenAIServer([Reply.broken()] * 3) as server, pytest.raises(LLMError):
        client_for(server).chat(USER)


def test_chat_parsed_retries_malformed_output_with_the_problem() -> None:
    def parse(result: ChatResult) -> dict[str, Any]:
        return parse_json_object(result.content)

    replies = [Reply.text("{oops}", usage=(10, 2)), Reply.json({"a": 1}, usage=(12, 3))]
    charged: list[int] = []
    with ScriptedOpenAIServer(replies) as server:
        client = client_for(server)
        value = client.chat_parsed(USER, parse, on_result=lambda r: charged.append(r.input_tokens))
        correction = server.requests[1]["messages"][-1]["content"]
    assert value == {"a": 1}
    assert charged == [10, 12]
    assert "invalid" in correction and "bad JSON" in correction
    assert server.requests[1]["messages"][-2] == {"role": "assistant", "content": "{oops}"}


def test_chat_parsed_gives_up_after_attempts() -> None:
    with ScriptedOpenAIServer([Reply.refuse("no way")] * 3) as server:
        client = client_for(server, attempts=3)

        def parse(result: ChatResult) -> str:
            check_refusal(result)
            return "never"

        with pytest.raises(LLMError, match="malformed model output after 3 attempts: the model refused"):
            client.chat_parsed(USER, parse)
        assert len(server.requests) == 3


def test_before_call_can_stop_a_call() -> None:
    def stop(history: list[dict[str, Any]]) -> None:
        raise LLMError("token budget exhausted")

    with ScriptedOpenAIServer([Reply.text("{}")]) as server:
        with pytest.raises(LLMError, match="budget"):
            client_for(server).chat_parsed(USER, parse_json_object, before_call=stop)
        assert server.requests == []


@pytest.mark.parametrize("text, problem", [
    ("", "empty reply"), ("no braces", "no JSON object"), ('{"a": }', "bad JSON"), ("[1]", "no JSON"),
])
def test_parse_json_object_rejects(text: str, problem: str) -> None:
    with pytest.raises(MalformedOutput, match=problem):
        parse_json_object(text)


def test_configuration_from_environment(monkeypatch: pytest.MonkeyPatch, clean_openai_env: None) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    client = LLMClient()
    assert client.base_url == "http://127.0.0.1:9/v1" and client.api_key == "memtrace-local"
    monkeypatch.setenv(ENV_OPENAI_BASE_URL, "http://127.0.0.1:8/v1")
    monkeypatch.setenv(ENV_OPENAI_MODEL, "tiny")
    monkeypatch.setenv("OPENAI_API_KEY", "k1")
    client = LLMClient()
    assert (client.base_url, client.model, client.api_key) == ("http://127.0.0.1:8/v1", "tiny", "k1")
    assert LLMClient(model="given").model == "given"


def test_no_endpoint_configured_is_an_llm_error(clean_openai_env: None) -> None:
    with pytest.raises(LLMError, match="no OpenAI endpoint configured"):
        LLMClient().chat(USER)


@pytest.mark.parametrize("options", [{"timeout": 0}, {"attempts": 0}, {"retry_delay": -1}])
def test_bad_constructor_arguments(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        LLMClient(**options)
