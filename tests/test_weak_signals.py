"""Attribution with weak failure signals (a judge's verdict, a thumbs-down): no gold answer, no evidence ids.

The question, the failed prediction and the graph must be enough to find the
evidence (:func:`~memtrace_otel.attribution.evidence.rerank_by_question`) and
the fact in it (:func:`~memtrace_otel.attribution.evidence.without_prediction`).
"""

from __future__ import annotations

import networkx as nx
import pytest

from memtrace_otel.attribution.base import ErrorType, FailureCase, create_engine
from memtrace_otel.attribution.evidence import (
    find_evidence,
    question_fit,
    rerank_by_question,
    without_prediction,
)
from memtrace_otel.semconv import Category, EvaluationSignal, VariableKind

_TEXTS = {
    "msg:D3:9@1": "[9 November 2022] Nate: Bye Joanna!",
    "msg:D3:2@1": "[9 November 2022] Joanna: Are you creating anything for YouTube these days?",
    "msg:D3:4@1": "[9 November 2022] Nate: Yeah, I'm creating gaming content for YouTube these weeks.",
}
_QUESTION = "What is Nate creating for YouTube on 9 November, 2022?"


def test_a_message_whose_own_words_cover_the_question_outranks_one_sharing_only_its_date_and_name() -> None:
    ranked = ["msg:D3:9@1", "msg:D3:2@1", "msg:D3:4@1"]  # as a search favouring short messages ranks them
    assert rerank_by_question(ranked, _QUESTION, None, _TEXTS.get)[0] == "msg:D3:4@1"
    # Below the reranked depth the search's order stands.
    assert rerank_by_question(ranked, _QUESTION, None, _TEXTS.get, depth=1) == ranked


def test_the_speaker_the_question_asks_about_and_the_failed_prediction_separate_equal_coverage() -> None:
    said_by_nate = "[1 May] Nate: I adopted a turtle"
    said_by_joanna = "[1 May] Joanna: I adopted a turtle"
    question = "What did Nate adopt?"
    assert question_fit(question, None, said_by_nate) > question_fit(question, None, said_by_joanna)
    stated = "[1 May] Nate: I adopted a turtle named Shelly"
    other = "[1 May] Nate: I adopted a turtle from the shelter"
    # "Shelly" was the failed answer: the message stating it is where it came from.
    assert question_fit(question, "Shelly", other) > question_fit(question, "Shelly", stated)


def test_without_prediction_keeps_the_message_when_every_sentence_states_the_prediction() -> None:
    text = "[1 May] Ann: I love tennis."
    assert without_prediction(text, "What does Ann love?", "tennis") == text
    assert without_prediction(text, "What does Ann love?", None) == text
    two = "[1 May] Ann: I love tennis. I went to Rome for the games."
    # The other sentence shares no word with the question: nothing points at it instead.
    assert without_prediction(two, "What does Ann like?", "love tennis") == two
    kept = without_prediction(two, "Which games did Ann see?", "love tennis")
    assert kept == "[1 May] Ann: I went to Rome for the games."


_KINDS = {"msg": VariableKind.MESSAGE, "unit": VariableKind.MEMORY_UNIT, "query": VariableKind.QUERY,
          "context": VariableKind.CONTEXT, "answer": VariableKind.ANSWER}
_Op = tuple[str, Category, list[str], list[str], str]
"""(name, category, inputs, outputs, trace id) of one operation, in execution order."""


def _pipeline_graph(contents: dict[str, str], ops: list[_Op]) -> tuple[nx.DiGraph, str]:
    """``contents`` (variable id -> text) and ``ops``, ended by a failed evaluation of the answer."""
    G = nx.DiGraph()
    for vid, text in contents.items():
        name = vid.rsplit("@", 1)[0]
        G.add_node(vid, type="variable", name=name, version=1, kind=_KINDS[name.split(":")[0]], content=text,
                   size=len(text), hash=f"h{vid}")
    for order, (name, category, inputs, outputs, trace) in enumerate(ops, 1):
        node = f"op:{trace}:{order:016x}"
        G.add_node(node, type="operation", name=name, category=category, trace_id=trace,
                   span_id=f"{order:016x}", order=order)
        G.add_edges_from(((v, node) for v in inputs), role="input")
        G.add_edges_from(((node, v) for v in outputs), role="output")
    evaluation = "op:tq:00000000000000ff"
    G.add_node(evaluation, type="operation", name="sys.evaluate", category=Category.EVALUATION, trace_id="tq",
               span_id="00000000000000ff", order=len(ops) + 1, passed=False)
    G.add_edge("answer:q@1", evaluation, role="input")
    return G, evaluation


def _tennis_graph() -> tuple[nx.DiGraph, FailureCase, str, str]:
    """Ann's message says two things; the extraction kept the one the failed answer came from."""
    contents = {
        "msg:D1:1@1": "[1 May 2023] Ann: I love watching tennis travel shows. I went to Rome for the tennis.",
        "msg:D1:2@1": "[1 May 2023] Bob: The weather was grey all week.",
        "unit:1@1": "Ann loves watching tennis travel shows",
        "unit:2@1": "Bob: grey weather",
        "query:q@1": "Where did Ann travel for tennis?",
        "context:q@1": "Ann loves watching tennis travel shows\nBob: grey weather",
        "answer:q@1": "watching tennis travel shows",
    }
    ops = [("sys.extract", Category.EXTRACTION, ["msg:D1:1@1"], ["unit:1@1"], "t1"),
           ("sys.extract", Category.EXTRACTION, ["msg:D1:2@1"], ["unit:2@1"], "t1"),
           ("sys.query", Category.INGEST, [], ["query:q@1"], "tq"),
           ("sys.retrieve", Category.RETRIEVAL, ["query:q@1", "unit:1@1", "unit:2@1"], ["context:q@1"], "tq"),
           ("sys.generate", Category.GENERATION, ["query:q@1", "context:q@1"], ["answer:q@1"], "tq")]
    G, evaluation = _pipeline_graph(contents, ops)
    case = FailureCase(evaluation, question=contents["query:q@1"], prediction=contents["answer:q@1"],
                       signal=EvaluationSignal.FEEDBACK, answer="answer:q@1")
    return G, case, "op:t1:0000000000000001", "op:tq:0000000000000005"


def test_without_gold_the_fact_is_the_sentence_the_failed_answer_did_not_come_from() -> None:
    G, case, extraction, _ = _tennis_graph()
    assert find_evidence(G, case, use_embeddings=False)[0] == ["msg:D1:1@1"]
    result = create_engine("lineage", use_embeddings=False).attribute(G, case)
    # "Rome" never reached memory: the extraction lost it. Taking the sentence the question's words
    # point at ("tennis travel"), which the failed answer repeats, would blame the generation.
    assert (result.operation, result.error_type) == (extraction, ErrorType.EXTRACTION)


def test_a_gold_answer_still_decides_the_fact() -> None:
    G, case, _, generation = _tennis_graph()
    case.gold, case.signal = "tennis travel shows", EvaluationSignal.CORRECTION
    result = create_engine("lineage", use_embeddings=False).attribute(G, case)
    assert result.operation == generation and result.error_type is ErrorType.RESPONSE


def test_cached_embeddings_equal_fresh_ones_whatever_the_batch() -> None:
    pytest.importorskip("wordllama")
    np = pytest.importorskip("numpy")
    from memtrace_otel.attribution.ranking import embedder

    embed = embedder()
    if embed is None:
        pytest.skip("wordllama could not load its bundled weights")
    first = embed(["Ann adopted a dog", "Bob went hiking"])
    again = embed(["Bob went hiking", "a text not seen before", "Ann adopted a dog"])
    assert np.allclose(first[0], again[2]) and np.allclose(first[1], again[0])
    assert abs(float(np.linalg.norm(again[1])) - 1.0) < 1e-5


def test_with_neither_evidence_nor_content_the_answers_own_read_path_is_offered_as_ambiguous() -> None:
    G, case, extraction, generation = _tennis_graph()
    for _, data in G.nodes(data=True):
        data.pop("content", None)  # capture off: no message can be matched to the question
    retrieval = "op:tq:0000000000000004"
    result = create_engine("lineage", use_embeddings=False).attribute(G, case)
    assert result.operation == generation and result.error_type is ErrorType.RESPONSE
    ranked = [c.operation for c in result.candidates]
    assert ranked[:2] == [generation, retrieval] and extraction in ranked
    assert result.ambiguous and result.confidence < 0.2


def _pet_graph() -> tuple[nx.DiGraph, FailureCase, str, str]:
    """Bob's short reply repeats the correction's words; Ann's message, which the extraction cut, says it."""
    contents = {
        "msg:D1:1@1": "[1 May 2023] Bob: Max is a great name for a dog!",
        "msg:D2:1@1": "[8 May 2023] Ann: I adopted a dog from the shelter last week and named him Max.",
        "msg:D2:2@1": "[8 May 2023] Bob: The weather was grey all week.",
        "unit:1@1": "Bob likes talking about names",
        "unit:2@1": "Ann went to the shelter last week",
        "unit:3@1": "Bob: grey weather",
        "query:q@1": "What pet did Ann adopt?",
        "context:q@1": "Ann went to the shelter last week\nBob: grey weather",
        "answer:q@1": "a cat",
    }
    ops = [("sys.extract", Category.EXTRACTION, ["msg:D1:1@1"], ["unit:1@1"], "t1"),
           ("sys.extract", Category.EXTRACTION, ["msg:D2:1@1"], ["unit:2@1"], "t2"),
           ("sys.extract", Category.EXTRACTION, ["msg:D2:2@1"], ["unit:3@1"], "t2"),
           ("sys.query", Category.INGEST, [], ["query:q@1"], "tq"),
           ("sys.retrieve", Category.RETRIEVAL, ["query:q@1", "unit:1@1", "unit:2@1", "unit:3@1"],
            ["context:q@1"], "tq"),
           ("sys.generate", Category.GENERATION, ["query:q@1", "context:q@1"], ["answer:q@1"], "tq")]
    G, evaluation = _pipeline_graph(contents, ops)
    case = FailureCase(evaluation, question=contents["query:q@1"], prediction=contents["answer:q@1"],
                       gold="a dog named Max", signal=EvaluationSignal.CORRECTION, answer="answer:q@1")
    return G, case, "op:t1:0000000000000001", "op:t2:0000000000000002"


def test_a_correction_finds_the_message_that_answers_the_question_not_one_that_repeats_its_words() -> None:
    G, case, chat, extraction = _pet_graph()
    # Both messages say "dog", "named" and "Max"; only Ann's says what the question asks (she adopted).
    assert find_evidence(G, case, use_embeddings=False)[0] == ["msg:D2:1@1"]
    result = create_engine("lineage", use_embeddings=False).attribute(G, case)
    # Following Bob's reply too would blame its extraction, the earlier one, for a fact it never held.
    assert (result.operation, result.error_type) == (extraction, ErrorType.EXTRACTION)
    assert chat not in [c.operation for c in result.candidates[:1]]
