"""The ``llm-agent`` engine driven through the real openai client against the scripted server."""

from __future__ import annotations

from typing import Any

import pytest
from test_llm_graphs import (
    DATED_MESSAGE,
    GOLD,
    PREDICTION,
    QUESTION,
    deletion_loss,
    extraction_loss,
    first_case,
    many_questions,
    op_named,
    retrieval_miss,
    traced_graph,
)

from memtrace_otel.attribution import ErrorType, FailureCase, available_engines, create_engine
from memtrace_otel.attribution.llm_agent import LLMAgentEngine
from memtrace_otel.attribution.render import OperationIndex
from memtrace_otel.graph.query import failed_evaluations

from openai_server import OraclePolicy, Reply, ScriptedOpenAIServer


def agent(server: ScriptedOpenAIServer, **options: Any) -> LLMAgentEngine:
    options.setdefault("retry_delay", 0)
    options.setdefault("timeout", 10)
    engine = create_engine("llm-agent", base_url=server.base_url, **options)
    assert isinstance(engine, LLMAgentEngine)
    return engine


def tool_texts(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "tool")


def test_engines_are_registered() -> None:
    assert {"llm-agent", "llm-all-at-once", "flat-log"} <= set(available_engines())


def test_tool_loop_expand_judge_final() -> None:
    G = traced_graph(extraction_loss)
    case = first_case(G)
    index = OperationIndex(G)
    extract = op_named(G, "extract")
    alias = index.alias(extract)
    script = [
        Reply.tools(("expand", {"variable_id": "msg:D1:1@1"}), usage=(100, 10)),
        Reply.tools(("judge_operation", {"op_id": alias, "faulty": True, "reason": "date dropped"}),
                    usage=(200, 20)),
        Reply.tools(("final_answer", {"op_id": alias, "error_type": "ExtractionError",
                                      "explanation": "extract dropped May 2023", "confidence": 0.8}),
                    usage=(300, 30)),
    ]
    with ScriptedOpenAIServer(script) as server:
        result = agent(server).attribute(G, case)
        requests = server.requests
    assert result.failure_reason is None
    assert result.operation == extract and result.operation_name == "extract"
    assert result.span_id == G.nodes[extract]["span_id"] and result.category == "extraction"
    assert result.error_type is ErrorType.EXTRACTION and result.confidence == 0.8
    assert (result.input_tokens, result.output_tokens) == (600, 60)
    assert result.evidence_path[0] == "msg:D1:1@1" and extract in result.evidence_path
    assert result.evidence_path[-1] == case.answer
    # What the model was shown: the case first, then the expansion, then its own verdict.
    first = "\n".join(m["content"] or "" for m in requests[0]["messages"])
    frontier = "Frontier (expand next, earliest first): msg:D1:1@1"
    for expected in (QUESTION, GOLD, PREDICTION, "D1:1", frontier):
        assert expected in first
    assert {t["function"]["name"] for t in requests[0]["tools"]} == {"expand", "judge_operation",
                                                                     "final_answer"}
    expanded = tool_texts(requests[1])
    assert alias in expanded and DATED_MESSAGE in expanded and "mem:1@1" in expanded
    assert f"Operations seen, not yet judged: {alias}" in requests[1]["messages"][-1]["content"]
    assert f"Judged: {alias} FAULTY (date dropped)" in requests[2]["messages"][-1]["content"]


def test_oracle_follows_the_life_of_a_deleted_unit() -> None:
    G = traced_graph(deletion_loss)
    case = first_case(G)
    forget = op_named(G, "forget")
    hints = {QUESTION: (OperationIndex(G).alias(forget), "DeletionError")}
    with ScriptedOpenAIServer(OraclePolicy(hints)) as server:
        result = agent(server).attribute(G, case)
        shown = "\n".join(tool_texts(r) for r in server.requests)
    assert result.failure_reason is None
    assert result.operation == forget and result.error_type is ErrorType.DELETION
    assert "life of mem:1" in shown and "(deleted)" in shown


def test_walk_goes_on_from_the_query_side_when_the_evidence_lineage_ends() -> None:
    G = traced_graph(retrieval_miss)
    search = op_named(G, "search q1")
    hints = {QUESTION: (OperationIndex(G).alias(search), "RetrievalError")}
    with ScriptedOpenAIServer(OraclePolicy(hints)) as server:
        result = agent(server).attribute(G, first_case(G))
        states = [r["messages"][-1]["content"] for r in server.requests]
    assert any("Frontier (expand next, earliest first): query:q1@1, ctx:q1@1" in s for s in states)
    assert result.operation == search and result.error_type is ErrorType.RETRIEVAL


def test_retrieval_verdict_is_refused_until_memory_units_were_followed() -> None:
    G = traced_graph(deletion_loss)
    case = first_case(G)
    index = OperationIndex(G)
    search = index.alias(op_named(G, "search q1"))
    final = ("final_answer", {"op_id": search, "error_type": "RetrievalError", "explanation": "missed"})
    script = [Reply.tools(("expand", {"variable_id": "ctx:q1@1"})), Reply.tools(final), Reply.tools(final)]
    with ScriptedOpenAIServer(script) as server:
        result = agent(server).attribute(G, case)
        refusal = tool_texts(server.requests[2])
    assert "rejected: before blaming retrieval" in refusal and "mem:2@1" in refusal
    assert result.error_type is ErrorType.RETRIEVAL  # the model may insist once it was told
    assert len(server.requests) == 3


def test_budget_stops_with_failure_when_nothing_was_judged() -> None:
    G = traced_graph(extraction_loss)
    expand = Reply.tools(("expand", {"variable_id": "msg:D1:1@1"}))
    with ScriptedOpenAIServer(lambda body: expand) as server:
        engine = agent(server, token_budget=4000)
        result = engine.attribute(G, first_case(G))
        calls = len(server.requests)
    assert result.failure_reason == "token budget exhausted"
    assert result.operation is None
    assert 0 < result.tokens <= 4000
    assert calls >= 2


def test_budget_returns_the_earliest_faulty_candidate() -> None:
    G = traced_graph(extraction_loss)
    index = OperationIndex(G)
    refresh, extract = index.alias(op_named(G, "refresh")), index.alias(op_named(G, "extract"))
    judge = Reply.tools(("judge_operation", {"op_id": refresh, "faulty": True, "reason": "r"}),
                        ("judge_operation", {"op_id": extract, "faulty": True, "reason": "lost the date"}))
    with ScriptedOpenAIServer(lambda body: judge) as server:
        result = agent(server, token_budget=5000).attribute(G, first_case(G))
    assert result.failure_reason is None
    assert result.operation_name == "extract" and result.error_type is ErrorType.EXTRACTION
    assert result.explanation.startswith("token budget exhausted") and "lost the date" in result.explanation
    assert result.tokens <= 5000


def test_usage_beyond_the_budget_stops_after_the_call() -> None:
    G = traced_graph(extraction_loss)
    expand = Reply.tools(("expand", {"variable_id": "msg:D1:1@1"}), usage=(90_000, 10))
    with ScriptedOpenAIServer([expand]) as server:
        result = agent(server, token_budget=30_000).attribute(G, first_case(G))
    assert result.failure_reason == "token budget exhausted" and result.tokens == 90_010


@pytest.mark.parametrize("bad, reason", [
    (Reply.tools(("expand", "{not json")), "arguments are not JSON"),
    (Reply.tools(("expand", {"variable_id": "nope@1"})), "unknown variable id 'nope@1'"),
    (Reply.tools(("final_answer", {"op_id": "op99", "error_type": "ExtractionError"})), "unknown operation"),
    (Reply.tools(("final_answer", {"op_id": "op0", "error_type": "Weird"})), "unknown error type"),
    (Reply.tools(("judge_operation", {"op_id": "op0", "faulty": "yes"})), "faulty must be"),
    (Reply.tools(("teleport", {})), "unknown tool 'teleport'"),
    (Reply.refuse("no"), "the model refused: no"),
    (Reply.text("I think it was op0"), "no tool call"),
])
def test_malformed_output_is_retried_then_fails_the_case(bad: Reply, reason: str) -> None:
    G = traced_graph(extraction_loss)
    with ScriptedOpenAIServer([bad] * 3) as server:
        result = agent(server, max_malformed=3).attribute(G, first_case(G))
        requests = server.requests
    assert result.failure_reason is not None
    assert result.failure_reason.startswith("malformed model output after 3 attempts")
    assert reason in result.failure_reason
    assert len(requests) == 3
    assert "Problem with your last reply" in requests[1]["messages"][-1]["content"]
    assert result.tokens > 0


def test_one_malformed_reply_then_recovery() -> None:
    G = traced_graph(extraction_loss)
    final = {"op_id": OperationIndex(G).alias(op_named(G, "extract")), "error_type": "extraction_error",
             "explanation": "lost"}
    script = [Reply.tools(("final_answer", {**final, "op_id": "op77"})), Reply.tools(("final_answer", final))]
    with ScriptedOpenAIServer(script) as server:
        result = agent(server).attribute(G, first_case(G))
        second = server.requests[1]
    assert result.failure_reason is None and result.operation_name == "extract"
    assert "error: unknown operation id 'op77'" in tool_texts(second)


def test_plain_json_final_answer_is_accepted() -> None:
    G = traced_graph(extraction_loss)
    alias = OperationIndex(G).alias(op_named(G, "extract"))
    with ScriptedOpenAIServer([Reply.json({"operation": alias, "error_type": "ExtractionError",
                                           "explanation": "x"})]) as server:
        result = agent(server).attribute(G, first_case(G))
    assert result.operation_name == "extract" and result.confidence == 0.5


def test_timeout_fails_the_case_with_the_reason() -> None:
    G = traced_graph(extraction_loss)
    with ScriptedOpenAIServer([Reply.text("late", delay=30)] * 2) as server:
        result = agent(server, timeout=0.2, attempts=2).attribute(G, first_case(G))
    assert result.failure_reason == "timeout after 0.2s (2 attempts)"
    assert result.operation is None and result.seconds > 0.3


def test_batch_goes_on_after_a_failed_case() -> None:
    G = traced_graph(many_questions)
    cases = [FailureCase.from_graph(G, e) for e in failed_evaluations(G)]
    index = OperationIndex(G)
    hints = {c.question: (index.alias(op_named(G, "extract late")), "ExtractionError") for c in cases}
    oracle = OraclePolicy(hints)

    def script(body: dict[str, Any]) -> Reply:
        if "Where did Melanie" in body["messages"][1]["content"]:
            return Reply.tools(("expand", "{broken"))
        return oracle(body)

    with ScriptedOpenAIServer(script) as server:
        engine = agent(server)
        results = [engine.attribute(G, case) for case in cases]
    assert len(results) == 3
    assert [r.failure_reason is None for r in results] == [True, False, True]
    assert "malformed" in (results[1].failure_reason or "")
    assert results[2].operation_name == "extract late"


def test_without_evidence_ids_the_walk_starts_from_the_answer_slice() -> None:
    G = traced_graph(extraction_loss)
    case = first_case(G)
    case.evidence = []
    with ScriptedOpenAIServer([Reply.text("nothing")] * 3) as server:
        agent(server).attribute(G, case)
        state = server.requests[0]["messages"][-1]["content"]
    assert "msg:D1:1@1" in state and "msg:D1:2@1" in state


@pytest.mark.parametrize("options", [{"max_steps": 0}, {"token_budget": 0}, {"max_frontier": 0}])
def test_bad_options_raise(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        LLMAgentEngine(base_url="http://127.0.0.1:9/v1", **options)
