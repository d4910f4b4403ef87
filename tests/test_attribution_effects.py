"""The lineage engine judges an operation by its effect on the information (issue 23).

Hand-built histories through the real MemoryTracer, one per mechanism: an
extraction's prompt never counts as carrying; each search is blamed for its
own store only, even when two searches write versions of one context name; a
unit alive in the searched store and not returned is a retrieval error; the
error type follows what the operation did (rewrote, deleted by a tombstone or
a ``DELETED`` marker, answered), whatever its category says.
"""

from __future__ import annotations

import networkx as nx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.attribution import Attribution, ErrorType, FailureCase
from memtrace_otel.attribution.lineage import LineageEngine
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.instrument.variables import Variable
from memtrace_otel.spans.model import record_from_readable

QUESTION = "What instrument does Caroline play?"
GOLD = "violin"
FACT = "[8 May 2023] Caroline: I have been playing the violin for ten years now."
OTHER = {
    "D1:2": "[8 May 2023] Melanie: I painted a lake sunrise last year.",
    "D1:3": "[8 May 2023] Caroline: My dog Max loves long walks in the park.",
}


class History:
    """Operations of a small memory system, each remembered by a label."""

    def __init__(self, provider: TracerProvider) -> None:
        self.mt = MemoryTracer(provider, capture_content=True)
        self.app = provider.get_tracer("scenario")
        self.ops: dict[str, str] = {}
        self.units: dict[str, Variable] = {}

    def remember(self, label: str, op: object) -> None:
        context = op.span_context  # type: ignore[attr-defined]
        self.ops[label] = f"op:{context.trace_id:032x}:{context.span_id:016x}"

    def extract(self, dia_id: str, text: str, fact: str | None, *, store: str = "s",
                category: str = Category.EXTRACTION, unit: str | None = None) -> None:
        """An extraction with its prompt and raw response as outputs, then one unit per fact."""
        with self.app.start_as_current_span(f"turn {dia_id}"):
            with self.mt.operation("extract", Category.EXTRACTION, store_id=store) as op:
                self.remember(f"extract {dia_id}", op)
                message = op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
                prompt = op.intermediate(f"prompt:{dia_id}", f"Extract facts from:\n{text}",
                                         kind=VariableKind.PROMPT)
                response = op.intermediate(f"response:{dia_id}", f'{{"facts": ["{fact or ""}"]}}',
                                           kind=VariableKind.RESPONSE)
                facts = op.write(f"facts:{dia_id}", fact or "", kind=VariableKind.FACTS)
                op.step("prompt", [message], [prompt])
                op.step("response", [prompt], [response])
            if fact:
                with self.mt.operation("create", category, gen_ai_operation="create_memory",
                                       store_id=store) as op:
                    self.remember(f"create {dia_id}", op)
                    op.read(facts)
                    self.units[dia_id] = op.write(f"mem:{dia_id}", unit or fact,
                                                  kind=VariableKind.MEMORY_UNIT)

    def decide(self, label: str, *, update: tuple[str, str] | None = None, delete: str | None = None) -> None:
        """MemBase's shape: one ``update``-category decision that rewrites or deletes (by a marker)."""
        with self.mt.operation("memory_system.update_memory_decision", Category.UPDATE) as op:
            self.remember(label, op)
            if update is not None:
                key, text = update
                self.units[key] = op.update(self.units[key], text)
            if delete is not None:
                op.read(self.units[delete])
                op.write(f"delete_marker:{label}", "DELETED", kind=VariableKind.OTHER)

    def search(self, case: str, returned: list[str], *, store: str = "s", context: str | None = None
               ) -> Variable:
        with self.mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                               store_id=store) as op:
            self.remember(f"search {case} {store}", op)
            op.write(f"query:{case}", QUESTION, kind=VariableKind.QUERY)
            units = [op.read(self.units[key]) for key in returned]
            return op.write(context or f"context:{case}:{store}", "\n".join(str(u.content) for u in units),
                            kind=VariableKind.CONTEXT)

    def answer(self, case: str, contexts: list[Variable], prediction: str, *,
               category: str = Category.GENERATION, evidence: tuple[str, ...] = ("D1:1",)) -> None:
        with self.mt.operation("answer", category) as op:
            self.remember(f"answer {case}", op)
            for context in contexts:
                op.read(context)
            answer = op.write(f"answer:{case}", prediction, kind=VariableKind.ANSWER)
        with self.mt.operation("judge", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, question=QUESTION, prediction=prediction, gold=GOLD,
                                 evidence=list(evidence), answer=answer, case_id=case)


def verdict_of(exporter: InMemorySpanExporter, case: str = "q1") -> Attribution:
    G: nx.DiGraph = build_graph(record_from_readable(s) for s in exporter.get_finished_spans())
    evaluation = next(e for e in failed_evaluations(G) if G.nodes[e].get("case") == case)
    return LineageEngine().attribute(G, FailureCase.from_graph(G, evaluation))


def others(history: History, *, store: str = "s") -> None:
    for dia_id, text in OTHER.items():
        history.extract(dia_id, text, text.split(": ", 1)[1], store=store)


def test_a_prompt_holding_the_message_does_not_make_the_extraction_carry(tracer_provider, span_exporter):
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played an instrument for ten years.")
    others(history)
    context = history.search("q1", ["D1:1", "D1:2"])
    history.answer("q1", [context], "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["extract D1:1"], ErrorType.EXTRACTION)


def test_the_extraction_that_kept_the_fact_is_not_blamed(tracer_provider, span_exporter):
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played the violin for ten years.")
    others(history)
    context = history.search("q1", ["D1:2"])
    history.answer("q1", [context], "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["search q1 s"], ErrorType.RETRIEVAL)


@pytest.mark.parametrize("shared_name", [False, True], ids=["own-contexts", "one-context-name"])
def test_the_search_of_the_store_that_held_it_is_blamed(tracer_provider, span_exporter, shared_name):
    """Two searches, one per speaker: the miss is the one of Caroline's store, not Melanie's."""
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played the violin for ten years.", store="caroline")
    history.extract("D1:3", OTHER["D1:3"], "Caroline's dog Max loves long walks.", store="caroline")
    history.extract("D1:2", OTHER["D1:2"], "Melanie painted a lake sunrise last year.", store="melanie")
    name = "context:q1" if shared_name else None
    melanie = history.search("q1", ["D1:2"], store="melanie", context=name)
    caroline = history.search("q1", ["D1:3"], store="caroline", context=name)
    history.answer("q1", [caroline] if shared_name else [melanie, caroline], "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["search q1 caroline"], ErrorType.RETRIEVAL)


def test_an_alive_unit_of_another_store_does_not_blame_a_search(tracer_provider, span_exporter):
    """Only Melanie's store was searched and the fact is Caroline's: the search returned what its
    store held, so the miss is not a retrieval error of that search."""
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played the violin for ten years.", store="caroline")
    history.extract("D1:2", OTHER["D1:2"], "Melanie painted a lake sunrise last year.", store="melanie")
    context = history.search("q1", ["D1:2"], store="melanie")
    history.answer("q1", [context], "guitar")
    verdict = verdict_of(span_exporter)
    assert verdict.operation != history.ops["search q1 melanie"]


def test_an_update_category_rewrite_without_the_fact_is_an_update_error(tracer_provider, span_exporter):
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played the violin for ten years.")
    others(history)
    history.decide("bad merge", update=("D1:1", "Caroline has played an instrument for ten years."))
    context = history.search("q1", ["D1:1"])
    history.answer("q1", [context], "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["bad merge"], ErrorType.UPDATE)


def test_a_deleted_marker_under_the_update_category_is_a_deletion_error(tracer_provider, span_exporter):
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played the violin for ten years.")
    others(history)
    history.decide("harmless", update=("D1:2", "Melanie painted a sunrise over a lake last year."))
    history.decide("bad delete", delete="D1:1")
    context = history.search("q1", ["D1:2"])
    history.answer("q1", [context], "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["bad delete"], ErrorType.DELETION)


def test_a_marker_deleting_another_unit_leaves_the_fact_alive(tracer_provider, span_exporter):
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played the violin for ten years.")
    others(history)
    history.decide("other delete", delete="D1:2")
    context = history.search("q1", ["D1:3"])
    history.answer("q1", [context], "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["search q1 s"], ErrorType.RETRIEVAL)


def test_answering_wrong_from_a_good_context_is_a_response_error_whatever_the_category(
        tracer_provider, span_exporter):
    """MemBase files question answering under ``evaluation``: the effect (it wrote the answer) decides."""
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played the violin for ten years.")
    others(history)
    context = history.search("q1", ["D1:1", "D1:2"])
    history.answer("q1", [context], "guitar", category=Category.EVALUATION)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["answer q1"], ErrorType.RESPONSE)


def test_a_unit_writer_filed_under_update_that_dropped_the_fact_is_an_extraction_error(
        tracer_provider, span_exporter):
    """MemBase files adding a memory under ``update``: a new unit without the fact is an extraction
    error, by its effect (it wrote no unit carrying it), not an update error by its category."""
    history = History(tracer_provider)
    history.extract("D1:1", FACT, "Caroline has played the violin for ten years.", category=Category.UPDATE,
                    unit="Caroline has played an instrument for ten years.")
    others(history)
    context = history.search("q1", ["D1:1", "D1:2"])
    history.answer("q1", [context], "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["create D1:1"], ErrorType.EXTRACTION)


# -- paraphrase: an extractor's third-person facts carry the message's information --------------------

NECKLACE = ("Thanks, Melanie! This necklace is super special to me - a gift from my grandma in my home "
            "country, Sweden. She gave it to me when I was young.")


def _paraphrase_history(provider: TracerProvider, fact: str) -> History:
    history = History(provider)
    history.extract("D4:3", NECKLACE, fact)
    others(history)
    return history


def _ask_grandma(history: History, returned: list[str]) -> None:
    with history.mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                              store_id="s") as op:
        history.remember("search", op)
        op.write("query:g", "What country is Caroline's grandma from?", kind=VariableKind.QUERY)
        units = [op.read(history.units[key]) for key in returned]
        context = op.write("context:g", "\n".join(str(u.content) for u in units), kind=VariableKind.CONTEXT)
    with history.mt.operation("answer", Category.GENERATION) as op:
        op.read(context)
        answer = op.write("answer:g", "Norway", kind=VariableKind.ANSWER)
    with history.mt.operation("judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question="What country is Caroline's grandma from?", prediction="Norway",
                             gold="Sweden", evidence=["D4:3"], answer=answer, case_id="q1")


needs_embeddings = pytest.mark.skipif(
    __import__("memtrace_otel.attribution.ranking", fromlist=["embedder"]).embedder() is None,
    reason="the offline embedding model (wordllama, pip install memtrace-otel[semantic]) is not installed")


@needs_embeddings
def test_a_paraphrased_fact_carries_the_message(tracer_provider, span_exporter):
    """'her grandmother in Sweden' says 'my grandma in my home country, Sweden' in other words: the unit
    carries it, so the search that missed it is to blame, not the extraction."""
    history = _paraphrase_history(tracer_provider, "Caroline received a special necklace as a gift from her "
                                                   "grandmother in Sweden.")
    _ask_grandma(history, ["D1:2"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["search"], ErrorType.RETRIEVAL)


def test_a_paraphrase_that_lost_the_answer_does_not_carry(tracer_provider, span_exporter):
    history = _paraphrase_history(tracer_provider, "Caroline received a special necklace as a gift from her "
                                                   "grandmother in her home country.")
    _ask_grandma(history, ["D1:2"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["extract D4:3"], ErrorType.EXTRACTION)


def test_the_scope_of_a_shared_store_is_read_off_what_searches_returned(tracer_provider, span_exporter):
    """mem0's collection holds every user's memories under one store id; a search sees one user's. The
    fact is Caroline's (her ingestion searched and wrote her units), so Melanie's search is not to blame."""
    history = History(tracer_provider)
    history.extract("D1:3", OTHER["D1:3"], "Caroline's dog Max loves long walks.")
    history.extract("D1:2", OTHER["D1:2"], "Melanie painted a lake sunrise last year.")
    with history.app.start_as_current_span("turn D1:1"):
        history.search("ingest D1:1", ["D1:3"])  # the add's own search of Caroline's memories
        history.extract("D1:1", FACT, "Caroline has played the violin for ten years.")
    melanie = history.search("q1", ["D1:2"], context="context:q1:melanie")
    melanie_op = history.ops["search q1 s"]
    caroline = history.search("q1", ["D1:3"], context="context:q1:caroline")
    caroline_op = history.ops["search q1 s"]
    history.answer("q1", [melanie, caroline], "guitar")
    verdict = verdict_of(span_exporter)
    assert melanie_op != caroline_op
    assert (verdict.operation, verdict.error_type) == (caroline_op, ErrorType.RETRIEVAL)


# -- stored records read as what they say -------------------------------------------------------------


def test_a_json_record_reads_as_its_text_dated_in_words():
    from memtrace_otel.text import readable

    record = '{"id": "m1", "memory": "Ann went hiking last week", "timestamp": "2023-05-08T13:56:00"}'
    assert readable(record) == "[8 May 2023] Ann went hiking last week [the week before 8 May 2023]"
    assert readable(record, resolve=False) == "[8 May 2023] Ann went hiking last week"
    buffer = '{"message_buffer": ["Ann: hi\\nTimestamp: 2023-05-08T13:56:00", "Bob: yo"]}'
    assert readable(buffer) == "[8 May 2023] Ann: hi\nBob: yo"
    assert readable("{not json") == "{not json"


@pytest.mark.parametrize(("said", "meaning"), [
    ("yesterday", "7 May 2023"), ("last weekend", "the weekend before 8 May 2023"),
    ("last Friday", "the friday before 8 May 2023"), ("last year", "2022"), ("last month", "April 2023"),
    ("two years ago", "2021"), ("3 days ago", "5 May 2023"), ("next month", "June 2023"),
])
def test_relative_times_resolve_against_the_line_date(said, meaning):
    from memtrace_otel.text import readable

    assert readable(f"[8 May 2023] Ann: I moved {said}.") == f"[8 May 2023] Ann: I moved {said} [{meaning}]."


def test_a_relative_time_resolved_against_the_message_date_carries_the_gold(tracer_provider, span_exporter):
    """'yesterday' said on 8 May 2023 is the gold '7 May 2023'; a unit on another day does not carry it."""
    history = History(tracer_provider)
    said = "[8 May 2023] Caroline: I went to the LGBTQ support group yesterday."
    history.extract("D1:1", said, "[8 May 2023] Caroline went to an LGBTQ support group yesterday.")
    history.extract("D1:2", "[9 May 2023] Caroline: The support group was great.",
                    "[9 May 2023] Caroline liked the support group.")
    others(history)
    context = history.search("q1", ["D1:2"])
    with history.mt.operation("answer", Category.GENERATION) as op:
        op.read(context)
        answer = op.write("answer:q1", "9 May 2023", kind=VariableKind.ANSWER)
    with history.mt.operation("judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question="When did Caroline go to the LGBTQ support group?",
                             prediction="9 May 2023", gold="7 May 2023", evidence=["D1:1"], answer=answer,
                             case_id="q1")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (history.ops["search q1 s"], ErrorType.RETRIEVAL)
    assert "mem:D1:1@1" in verdict.explanation
