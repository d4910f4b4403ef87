"""The offline lineage engine on hand-built memory histories, one per error type and system shape.

Each scenario runs a small memory system through the real MemoryTracer and SDK
pipeline, injects one fault by hand, and checks that the engine blames the
operation that lost the information, with the right error type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.attribution import ErrorType, FailureCase, create_engine
from memtrace_otel.attribution.lineage import LineageEngine, find_evidence
from memtrace_otel.attribution.presence import critical_information, tokenize
from memtrace_otel.attribution.spectrum import ochiai_scores
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.instrument.variables import Variable
from memtrace_otel.spans.model import record_from_readable

QUESTION = "When did Caroline go to the LGBTQ support group?"
GOLD = "7 May 2023"
FACT = "[8 May 2023] Caroline: I went to the LGBTQ support group on 7 May 2023."
OTHER_TURNS = {
    "D1:2": "[8 May 2023] Melanie: I painted a lake sunrise last year.",
    "D1:3": "[8 May 2023] Caroline: My dog Max loves long walks in the park.",
}


@dataclass
class Memory:
    """A tiny instrumented memory system; each method is one traced operation (or a few)."""

    provider: TracerProvider
    capture: bool = True
    mt: MemoryTracer = field(init=False)
    units: dict[str, Variable] = field(default_factory=dict)
    ops: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.mt = MemoryTracer(self.provider, capture_content=self.capture)
        self.app = self.provider.get_tracer("scenario")

    def _remember(self, label: str, op: object) -> None:
        context = op.span_context  # type: ignore[attr-defined]
        self.ops[label] = f"op:{context.trace_id:032x}:{context.span_id:016x}"

    # -- write side -------------------------------------------------------
    def extract(self, dia_id: str, text: str, facts: list[str] | None = None, *, add: bool = True) -> None:
        """Mem0 shape: extract facts from a turn, then one ADD per fact."""
        facts = [text] if facts is None else facts
        with self.app.start_as_current_span(f"turn {dia_id}"):
            with self.mt.operation("mem0.extract", Category.EXTRACTION) as op:
                self._remember(f"extract {dia_id}", op)
                message = op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
                found = op.write(f"facts:{dia_id}", "\n".join(facts), kind=VariableKind.FACTS)
                del message
            for i, fact in enumerate(facts):
                with self.mt.operation("mem0.add", Category.EXTRACTION,
                                       gen_ai_operation="create_memory", store_id="s") as op:
                    self._remember(f"add {dia_id}#{i}", op)
                    op.read(found)
                    if add:
                        self.units[f"{dia_id}#{i}"] = op.write(f"mem:{dia_id}#{i}", fact,
                                                               kind=VariableKind.MEMORY_UNIT)

    def chunk(self, dia_id: str, text: str, *, keep: bool = True) -> None:
        """RAG shape: one chunk per message, no separate extraction."""
        with self.mt.operation("rag.chunk", Category.INGEST) as op:
            self._remember(f"chunk {dia_id}", op)
            op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
            chunk = op.write(f"chunk:{dia_id}", text if keep else "", kind=VariableKind.MEMORY_UNIT)
            self.units[dia_id] = chunk

    def update(self, key: str, text: str, label: str) -> None:
        with self.mt.operation("mem0.update", Category.UPDATE, gen_ai_operation="update_memory",
                               store_id="s") as op:
            self._remember(label, op)
            self.units[key] = op.update(self.units[key], text)

    def delete(self, key: str, label: str) -> None:
        with self.mt.operation("mem0.delete", Category.DELETION, gen_ai_operation="delete_memory",
                               store_id="s") as op:
            self._remember(label, op)
            self.units[key] = op.delete(self.units[key])

    # -- long-context shape ---------------------------------------------------
    def window_append(self, dia_id: str, text: str) -> None:
        with self.mt.operation("lc.append", Category.INGEST) as op:
            self._remember(f"append {dia_id}", op)
            op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
            old = self.units.get("window")
            lines = ([old.content] if old is not None and old.content else []) + [text]
            if old is None:
                self.units["window"] = op.write("window", "\n".join(lines), kind=VariableKind.STORE)
            else:
                self.units["window"] = op.update(old, "\n".join(lines))

    def window_trim(self, drop: int, label: str) -> None:
        with self.mt.operation("lc.trim", Category.UPDATE) as op:
            self._remember(label, op)
            old = self.units["window"]
            kept = str(old.content).split("\n")[drop:]
            self.units["window"] = op.update(old, "\n".join(kept))

    # -- read side ------------------------------------------------------------
    def ask(self, case: str, returned: list[str], prediction: str, *, gold: str = GOLD,
            question: str = QUESTION, evidence: tuple[str, ...] = ("D1:1",),
            rerank_keep: int | None = None, from_window: bool = False) -> None:
        with self.app.start_as_current_span(f"question {case}"):
            with self.mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                                   store_id="s") as op:
                self._remember(f"search {case}", op)
                query = op.write(f"query:{case}", question, kind=VariableKind.QUERY)
                if from_window:
                    units = [op.read(self.units["window"])]
                else:
                    units = [op.read(self.units[key]) for key in returned]
                context = op.write(f"context:{case}", "\n".join(str(u.content) for u in units),
                                   kind=VariableKind.CONTEXT)
            if rerank_keep is not None:
                with self.mt.operation("rerank", Category.RERANK) as op:
                    self._remember(f"rerank {case}", op)
                    op.read(context)
                    kept = "\n".join(str(u.content) for u in units[:rerank_keep])
                    context = op.write(f"reranked:{case}", kept, kind=VariableKind.CONTEXT)
            with self.mt.operation("answer", Category.GENERATION) as op:
                self._remember(f"answer {case}", op)
                op.read(query)
                op.read(context)
                answer = op.write(f"answer:{case}", prediction, kind=VariableKind.ANSWER)
            with self.mt.operation("judge", Category.EVALUATION) as op:
                op.read(answer)
                passed = set(tokenize(prediction)) == set(tokenize(gold))
                op.record_evaluation(passed, question=question, prediction=prediction, gold=gold,
                                     evidence=list(evidence), answer=answer, case_id=case)


def graph_of(exporter: InMemorySpanExporter) -> nx.DiGraph:
    return build_graph(record_from_readable(span) for span in exporter.get_finished_spans())


def attribute(G: nx.DiGraph, case: str = "q1"):
    evaluation = next(e for e in failed_evaluations(G) if G.nodes[e].get("case") == case)
    return LineageEngine().attribute(G, FailureCase.from_graph(G, evaluation))


def mem0_history(memory: Memory, *, fact_text: str = FACT, facts: list[str] | None = None,
                 add: bool = True) -> None:
    memory.extract("D1:1", FACT, facts if facts is not None else [fact_text], add=add)
    for dia_id, text in OTHER_TURNS.items():
        memory.extract(dia_id, text)


def rag_history(memory: Memory) -> None:
    memory.chunk("D1:1", FACT)
    for dia_id, text in OTHER_TURNS.items():
        memory.chunk(dia_id, text)


# -- one scenario per error type ------------------------------------------------------


def test_extraction_error_blames_the_extraction_that_dropped_the_fact(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    mem0_history(memory, facts=["Caroline likes support groups."])
    memory.ask("q1", ["D1:2#0"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert verdict.error_type is ErrorType.EXTRACTION
    assert verdict.operation == memory.ops["extract D1:1"]
    assert "7 May 2023" in verdict.explanation and "mem0.extract" in verdict.explanation


def test_extraction_error_at_the_add_decision_when_facts_carried_it(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    mem0_history(memory, add=False)  # facts carry the date; the ADD decision wrote nothing
    memory.ask("q1", ["D1:2#0"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert verdict.error_type is ErrorType.EXTRACTION
    assert verdict.operation == memory.ops["add D1:1#0"]


def test_update_error_blames_the_overwrite(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    mem0_history(memory)
    memory.update("D1:1#0", "Caroline: I went to the LGBTQ support group.", "bad update")
    memory.update("D1:3#0", "Caroline's dog Max loves walks.", "harmless update")
    memory.ask("q1", ["D1:1#0"], "the support group")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.UPDATE, memory.ops["bad update"])
    assert verdict.trace_id and verdict.span_id and verdict.operation_name == "mem0.update"


def test_deletion_error_blames_the_delete(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    mem0_history(memory)
    memory.delete("D1:1#0", "bad delete")
    memory.ask("q1", ["D1:2#0", "D1:3#0"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.DELETION, memory.ops["bad delete"])
    path = verdict.evidence_path
    assert path[0] == "msg:D1:1@1" and memory.ops["bad delete"] in path
    assert path[-1] == verdict.case.evaluation


def test_retrieval_error_when_the_store_holds_it(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    rag_history(memory)
    memory.ask("q1", ["D1:2", "D1:3"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.RETRIEVAL, memory.ops["search q1"])
    assert "chunk:D1:1@1" in verdict.explanation


def test_response_error_when_the_context_holds_it(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    rag_history(memory)
    memory.ask("q1", ["D1:1", "D1:2"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.RESPONSE, memory.ops["answer q1"])
    assert verdict.confidence >= 0.8


def test_rerank_that_drops_the_evidence_is_a_retrieval_error(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    rag_history(memory)
    memory.ask("q1", ["D1:2", "D1:1"], "last year", rerank_keep=1)
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.RETRIEVAL, memory.ops["rerank q1"])


def test_rag_chunking_that_loses_the_message_is_an_extraction_error(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    memory.chunk("D1:1", FACT, keep=False)
    for dia_id, text in OTHER_TURNS.items():
        memory.chunk(dia_id, text)
    memory.ask("q1", ["D1:2"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.EXTRACTION, memory.ops["chunk D1:1"])


def test_long_context_trim_is_an_update_error(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    memory.window_append("D1:1", FACT)
    memory.window_trim(0, "harmless trim")
    for dia_id, text in OTHER_TURNS.items():
        memory.window_append(dia_id, text)
    memory.window_trim(1, "bad trim")
    memory.ask("q1", [], "last year", from_window=True)
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.UPDATE, memory.ops["bad trim"])


def test_long_context_with_the_fact_in_the_window_is_a_response_error(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    for dia_id, text in {"D1:1": FACT, **OTHER_TURNS}.items():
        memory.window_append(dia_id, text)
    memory.ask("q1", [], "last year", from_window=True)
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.RESPONSE, memory.ops["answer q1"])


# -- the MemTrace rule: decisive, not merely lossy ------------------------------------


def test_an_overwrite_is_not_decisive_while_another_unit_still_holds_the_fact(tracer_provider,
                                                                              span_exporter):
    memory = Memory(tracer_provider)
    mem0_history(memory, facts=[FACT, "Caroline went to the support group on 7 May 2023."])
    memory.update("D1:1#0", "Caroline likes the support group.", "lossy update")
    memory.ask("q1", ["D1:2#0"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.RETRIEVAL, memory.ops["search q1"])


def test_the_last_loss_of_the_fact_is_the_decisive_one(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    mem0_history(memory, facts=[FACT, "Caroline went to the support group on 7 May 2023."])
    memory.update("D1:1#0", "Caroline likes the support group.", "first loss")
    memory.delete("D1:1#1", "last loss")
    memory.ask("q1", ["D1:2#0"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.DELETION, memory.ops["last loss"])


# -- degraded inputs --------------------------------------------------------------------


def test_without_content_the_walk_runs_on_lineage_with_lower_confidence(tracer_provider, span_exporter):
    memory = Memory(tracer_provider, capture=False)
    mem0_history(memory)
    memory.delete("D1:1#0", "bad delete")
    memory.ask("q1", ["D1:2#0"], "last year")
    G = graph_of(span_exporter)
    assert all(d.get("content") is None for _, d in G.nodes(data=True) if d["type"] == "variable")
    verdict = attribute(G)
    assert (verdict.error_type, verdict.operation) == (ErrorType.DELETION, memory.ops["bad delete"])
    assert verdict.confidence < 0.5 and verdict.failure_reason is None


def test_without_evidence_ids_bm25_and_embeddings_find_the_message(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    rag_history(memory)
    memory.ask("q1", ["D1:2", "D1:3"], "last year", evidence=())
    G = graph_of(span_exporter)
    evaluation = failed_evaluations(G)[0]
    found, given = find_evidence(G, FailureCase.from_graph(G, evaluation))
    assert (found, given) == (["msg:D1:1@1"], False)
    verdict = attribute(G)
    assert (verdict.error_type, verdict.operation) == (ErrorType.RETRIEVAL, memory.ops["search q1"])


def test_a_case_without_an_answer_is_a_failed_attribution_not_an_exception(tracer_provider,
                                                                          span_exporter):
    memory = Memory(tracer_provider)
    rag_history(memory)
    memory.ask("q1", ["D1:2"], "last year")
    G = graph_of(span_exporter)
    case = FailureCase.from_graph(G, failed_evaluations(G)[0])
    case.answer = None
    result = create_engine("lineage").attribute(G, case)
    assert result.operation is None and "answer" in str(result.failure_reason)


def test_spectrum_ranks_the_shared_faulty_retrieval_highest(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    rag_history(memory)
    memory.ask("q1", ["D1:2"], "last year")
    memory.ask("q2", ["D1:2"], "painted a lake sunrise", question="What did Melanie paint?",
               gold="painted a lake sunrise", evidence=("D1:2",))
    G = graph_of(span_exporter)
    scores = ochiai_scores(G)
    assert scores[memory.ops["search q1"]] > scores[memory.ops["search q2"]]


def test_engine_is_deterministic_and_timed(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    mem0_history(memory)
    memory.delete("D1:1#0", "bad delete")
    memory.ask("q1", ["D1:2#0"], "last year")
    G = graph_of(span_exporter)
    first, second = attribute(G), attribute(G)
    assert first.to_dict() | {"seconds": 0} == second.to_dict() | {"seconds": 0}
    assert first.seconds > 0


@pytest.mark.parametrize(("gold", "text", "carried"), [
    ("7 May 2023", "Caroline went on 7 May 2023", True),
    ("7 May 2023", "Caroline went on 17 May 2023", False),
    ("adoption agencies", "She researched adoption agencies", True),
    ("adoption agencies", "She researched schools", False),
])
def test_presence_of_the_critical_information(gold, text, carried):
    info = critical_information(gold, "When did she go?")
    assert info.carried_by(tokenize(text)) is carried


# -- what "carrying the fact" means: the sentence that states it, its gold, its speaker ----


NATE = ("[9 November 2022] Nate: Yeah actually - creating gaming content for YouTube. "
        "It's a cool way to satisfy my video game cravings when there aren't any tourneys.")
NATE_FACTS = ["[9 November 2022] Nate: Yeah actually - creating gaming content for YouTube.",
              "[9 November 2022] Nate: It's a cool way to satisfy my video game cravings."]


def test_the_fact_is_the_sentence_the_question_points_at_not_the_whole_message(tracer_provider,
                                                                              span_exporter):
    # "videos" of the gold sits in another sentence of the message; the unit holding the sentence
    # about YouTube content carried the fact until the update overwrote it.
    memory = Memory(tracer_provider)
    memory.extract("D1:1", NATE, NATE_FACTS)
    memory.extract("D1:2", OTHER_TURNS["D1:2"])
    memory.update("D1:1#0", "[9 November 2022] Joanna: Wow, that's a cool idea!", "bad update")
    memory.ask("q1", ["D1:1#1", "D1:2#0"], "video game cravings",
               question="What new content is Nate creating for YouTube?", gold="Gaming videos")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.UPDATE, memory.ops["bad update"])


def test_gold_elsewhere_in_the_window_does_not_make_a_similar_line_carry(tracer_provider,
                                                                        span_exporter):
    # After the trim, the window has "guitar" in one line and a near copy of the fact's sentence
    # about drums in another: neither line says James played guitar, so the trim lost it.
    memory = Memory(tracer_provider)
    turns = {
        "D1:1": "[18 September 2022] James: I used to play a guitar when I was younger.",
        "D1:2": "[18 September 2022] John: I used to play drums when I was younger.",
        "D1:3": "[18 September 2022] John: A guitar shop opened near the park.",
    }
    for dia_id, text in turns.items():
        memory.window_append(dia_id, text)
    memory.window_trim(1, "bad trim")
    memory.ask("q1", [], "drums", from_window=True, gold="guitar",
               question="What instrument did James play when he was younger?")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.UPDATE, memory.ops["bad trim"])


def test_the_same_words_from_another_speaker_do_not_carry_the_fact(tracer_provider, span_exporter):
    memory = Memory(tracer_provider)
    memory.extract("D1:1", "[2 October 2023] John: LeBron is the man - love his skills and leadership.")
    memory.extract("D1:2", OTHER_TURNS["D1:2"])
    memory.update("D1:1#0", "[2 October 2023] Tim: LeBron's skills and leadership are amazing.",
                  "bad update")
    memory.ask("q1", ["D1:1#0", "D1:2#0"], "amazing", question="What does John like about LeBron?",
               gold="His skills and leadership")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.UPDATE, memory.ops["bad update"])


# -- the earliest faulty operation ---------------------------------------------------------

LATER_SAYING = "[8 May 2023] Caroline: The LGBTQ support group on 7 May 2023 made me feel accepted."


@pytest.mark.parametrize(("duplicate_first", "blamed", "error_type"), [
    (False, "chunk D1:1", ErrorType.EXTRACTION),  # the chunker dropped it while nothing held it
    (True, "search q1", ErrorType.RETRIEVAL),  # not storing it again was a fine deduplication
])
def test_an_extraction_drop_precedes_a_retrieval_that_missed_a_later_copy(
        tracer_provider, span_exporter, duplicate_first, blamed, error_type):
    memory = Memory(tracer_provider)
    if duplicate_first:
        memory.chunk("D1:4", LATER_SAYING)
    memory.chunk("D1:1", FACT, keep=False)
    for dia_id, text in OTHER_TURNS.items():
        memory.chunk(dia_id, text)
    if not duplicate_first:
        memory.chunk("D1:4", LATER_SAYING)
    memory.ask("q1", ["D1:2"], "last year")
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (error_type, memory.ops[blamed])


def test_with_two_evidence_messages_the_earlier_loss_is_the_root_cause(tracer_provider,
                                                                      span_exporter):
    # The clarinet unit was overwritten during ingestion; the violin unit survived but was not
    # retrieved. Both lost part of the answer; the update came first.
    memory = Memory(tracer_provider)
    memory.extract("D1:1", "[25 May 2023] Melanie: I relax by playing my violin.")
    memory.extract("D2:1", "[28 August 2023] Melanie: Yeah, I play clarinet!")
    memory.extract("D2:2", OTHER_TURNS["D1:2"])
    memory.update("D2:1#0", "[28 August 2023] Melanie: I went camping.", "bad update")
    memory.ask("q1", ["D2:2#0"], "camping", question="What instruments does Melanie play?",
               gold="clarinet and violin", evidence=("D1:1", "D2:1"))
    verdict = attribute(graph_of(span_exporter))
    assert (verdict.error_type, verdict.operation) == (ErrorType.UPDATE, memory.ops["bad update"])
