"""The OpenAI-compatible steps, through the one LLM client, against the scripted server on 127.0.0.1."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("openai")

from memtrace_bench.locomo import QA, Session, Turn
from memtrace_bench.systems import SYSTEMS, Mem0StyleSystem, TracedRun
from memtrace_bench.systems.interfaces import ContextItem, MemoryEvent, Sentence, SimilarMemory
from memtrace_bench.systems.openai_llm import (
    OpenAIAnswerer,
    OpenAIDecider,
    OpenAIExtractor,
    OpenAIJudge,
    openai_components,
)
from memtrace_otel.llm_client import LLMClient, LLMError
from memtrace_otel.semconv import GenAI, MemTrace

from openai_server import Reply, ScriptedOpenAIServer

_NEW_FACT = re.compile(r"^New fact: (.*)$", re.MULTILINE)


def _decide(user: str) -> Reply:
    """A memory manager by keywords: what the tests below need, nothing more."""
    memories = json.loads(user.split("Existing memories:\n", 1)[1].split("\n\nNew fact:", 1)[0])
    fact = _NEW_FACT.search(user).group(1)  # type: ignore[union-attr]
    same = [m for m in memories if m["text"] == fact]
    if same:
        return Reply.json({"event": "NONE", "reason": "already known"})
    if "no longer" in fact and memories:
        return Reply.json({"event": "DELETE", "id": memories[0]["id"], "reason": "contradicted"})
    if "also" in fact and memories:
        return Reply.json({"event": "UPDATE", "id": memories[0]["id"], "reason": "same topic"})
    return Reply.json({"event": "ADD", "reason": "new"})


def _script(body: dict[str, Any]) -> Reply:
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "grade" in system:
        return Reply.json({"correct": "Rex" in user.split("Answer:")[1], "reason": "compared"})
    if "Extract" in system:
        return Reply.json({"facts": [user.split(": ", 1)[1]]})
    if "memory manager" in system:
        return _decide(user)
    return Reply.text("Rex" if "Rex" in user else "I don't know")


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(_script) as running:
        yield running


def _client(server: ScriptedOpenAIServer, **options: Any) -> LLMClient:
    return LLMClient(base_url=server.base_url, model="local", api_key="k", retry_delay=0, **options)


def test_openai_components_answer_judge_extract_with_usage(server: ScriptedOpenAIServer) -> None:
    client = _client(server)
    context = [ContextItem("u1", [Sentence("D1:1", "Ann", "8 May 2023", "I adopted a dog named Rex.")])]
    answer = OpenAIAnswerer(client=client).answer("What is Ann's dog called?", context)
    assert answer.text == "Rex" and answer.input_tokens > 0 and answer.output_tokens > 0
    judge = OpenAIJudge(client=client)
    assert judge.judge("q", "Rex", "Rex").passed
    assert not judge.judge("q", "Max", "Rex").passed
    turn = Turn("D1:1", "Ann", "I adopted Rex!", 1, "8 May 2023")
    extraction = OpenAIExtractor(client=client).extract(turn)
    facts = extraction.facts
    assert [f.text for f in facts] == ["I adopted Rex!"] and facts[0].dia_id == "D1:1"
    assert (extraction.model, extraction.provider) == ("local", "openai") and extraction.input_tokens > 0
    assert client.calls == 4 and client.input_tokens > 0
    assert all(r["model"] == "local" for r in server.requests)


def test_steps_take_the_endpoint_from_the_environment(server: ScriptedOpenAIServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMTRACE_OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("MEMTRACE_OPENAI_MODEL", "from-env")
    answerer = OpenAIAnswerer()
    assert answerer.model == "from-env"
    assert answerer.answer("Who is Max?", []).text == "I don't know"
    assert server.requests[-1]["model"] == "from-env"


def _memories(*texts: str) -> list[SimilarMemory]:
    return [SimilarMemory(f"mem:{i + 7}", (Sentence("D1:1", "Ann", "8 May 2023", t),), 0.5)
            for i, t in enumerate(texts)]


@pytest.mark.parametrize(("fact", "memories", "event", "target"), [
    ("I adopted a dog named Rex.", [], MemoryEvent.ADD, None),
    ("I adopted a dog named Rex.", ["I adopted a dog named Rex."], MemoryEvent.NONE, None),
    ("I also walk Rex daily.", ["I adopted a dog named Rex."], MemoryEvent.UPDATE, "mem:7"),
    ("I no longer have Rex.", ["I adopted a dog named Rex.", "I like dogs."], MemoryEvent.DELETE, "mem:7"),
])
def test_decider_maps_mem0_events_and_ids_back_to_units(server: ScriptedOpenAIServer, fact: str,
                                                        memories: list[str], event: MemoryEvent,
                                                        target: str | None) -> None:
    decision = OpenAIDecider(client=_client(server)).decide(
        Sentence("D2:1", "Ann", "9 May 2023", fact), _memories(*memories))
    assert (decision.event, decision.target) == (event, target)
    assert decision.input_tokens > 0 and decision.output_tokens > 0
    sent = server.requests[-1]["messages"][1]["content"]
    assert "Existing memories:" in sent and "mem:" not in sent  # the model sees small ids, not unit names


def test_decider_retries_a_malformed_reply_then_keeps_the_fact() -> None:
    bad = [Reply.text("UPDATE it"), Reply.json({"event": "UPDATE", "id": "9"}),
           Reply.json({"event": "MERGE"})]
    with ScriptedOpenAIServer(bad) as server:
        decision = OpenAIDecider(client=_client(server)).decide(
            Sentence("D2:1", "Ann", "9 May 2023", "I also walk Rex."), _memories("I adopted Rex."))
        assert len(server.requests) == 3
        assert "Your reply was invalid" in server.requests[1]["messages"][-1]["content"]
    assert decision.event is MemoryEvent.ADD and decision.target is None
    assert "unparsable" in decision.reason and '"event"' in decision.reason
    assert decision.input_tokens > 0


def test_an_unreachable_endpoint_is_one_error_not_a_wrong_verdict() -> None:
    with ScriptedOpenAIServer([Reply.broken('{"error": {"message": "down"}}', status=503)] * 2) as server:
        judge = OpenAIJudge(client=_client(server, attempts=2))
        with pytest.raises(LLMError, match="HTTP 503"):
            judge.judge("q", "Rex", "Rex")


def test_mem0_style_traces_its_search_and_every_decision_through_the_openai_decider(
        server: ScriptedOpenAIServer) -> None:
    turns = [Turn(f"D1:{i}", "Ann", text, 1, "8 May 2023") for i, text in enumerate(
        ["I adopted a dog named Rex.", "I adopted a dog named Rex.", "I also walk Rex daily.",
         "I no longer have Rex."], 1)]
    run = TracedRun(5, "mem0-openai")
    system = Mem0StyleSystem(run.tracer, openai_components(client=_client(server), embedder="lexical"))
    system.ingest_session(Session(1, "8 May 2023", turns))
    spans = run.sink.drain()
    run.close()
    named = [(s.attributes[MemTrace.OPERATION_NAME], s) for s in spans]
    decided = [s for name, s in named if name == "mem0.decide"]
    assert [s.attributes[MemTrace.OPERATION_OUTCOME] for s in decided] == ["add", "none", "update", "delete"]
    assert all(s.attributes[GenAI.USAGE_INPUT_TOKENS] > 0 for s in decided)
    assert len([s for name, s in named if name == "mem0.find_similar"]) == 4
    effects = [name for name, _ in named if name in ("mem0.add", "mem0.update", "mem0.delete")]
    assert effects == ["mem0.add", "mem0.update", "mem0.delete", "mem0.add"]
    assert [u.content.count("\n") for u in system.state.units.values()] == [0]


# Each kind of step gets its own token usage from the server, so a span's usage says which calls it counted.
_USAGE = {"grade": (19, 1), "Extract": (7, 2), "memory manager": (13, 3)}
_ANSWER_USAGE = (17, 5)


def _usage(body: dict[str, Any]) -> tuple[int, int]:
    system = body["messages"][0]["content"]
    return next((usage for key, usage in _USAGE.items() if key in system), _ANSWER_USAGE)


def _metered(body: dict[str, Any]) -> Reply:
    reply = _script(body)
    reply.usage = _usage(body)
    return reply


@pytest.mark.parametrize("name", ["mem0-style", "episodic"])
def test_llm_backed_steps_put_model_and_token_usage_on_their_spans(name: str) -> None:
    turns = [Turn(f"D1:{i}", "Ann", text, 1, "8 May 2023") for i, text in enumerate(
        ["I adopted a dog named Rex.", "I also walk Rex daily.", "Rex loves the park.", "I paint too."], 1)]
    with ScriptedOpenAIServer(_metered) as server:
        run = TracedRun(5, name)
        system = SYSTEMS[name](run.tracer, openai_components(client=_client(server), embedder="lexical"))
        system.ingest_session(Session(1, "8 May 2023", turns))
        system.ask(QA(0, "What is Ann's dog called?", "Rex", ("D1:1",), 4), "case-0")
        spans = run.sink.drain()
        run.close()
    metered = [s for s in spans if GenAI.REQUEST_MODEL in s.attributes]
    expected = {f"{name}.generate": _ANSWER_USAGE, f"{name}.evaluate": _USAGE["grade"],
                "mem0.decide": _USAGE["memory manager"], "mem0.extract": _USAGE["Extract"],
                "episodic.extract": _USAGE["Extract"]}
    assert {f"{name}.generate", f"{name}.evaluate"} < {s.attributes[MemTrace.OPERATION_NAME] for s in metered}
    for span in metered:
        attributes = span.attributes
        op = attributes[MemTrace.OPERATION_NAME]
        # An extraction calls the model once per message it read.
        calls = sum(i.startswith("msg:") for i in attributes[MemTrace.INPUTS]) if "extract" in op else 1
        assert (attributes[GenAI.REQUEST_MODEL], attributes[GenAI.PROVIDER_NAME]) == ("local", "openai")
        used = (attributes[GenAI.USAGE_INPUT_TOKENS], attributes[GenAI.USAGE_OUTPUT_TOKENS])
        assert used == (calls * expected[op][0], calls * expected[op][1]), op  # summed over the op's calls
    # Every call the server answered is on exactly one span.
    assert sum(s.attributes[GenAI.USAGE_INPUT_TOKENS] for s in metered) == sum(
        _usage(body)[0] for body in server.requests)
