"""Searches in several steps, records of several parts, and raw memcells (issue 23, MemBase's EverMemOS).

EverMemOS as MemBase traces it: a memcell is first stored as the messages it
holds, then an extraction rewrites it into an episode and atomic facts; a
search runs in steps (a retrieval that reads the query and writes a list of
record ids, a sufficiency check that reads the list, a final rerank that reads
the list and returns the records), and an answerer may read, by value, the
records another question's search returned. Each test fails without the
mechanism it names.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import networkx as nx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.attribution import Attribution, ErrorType, FailureCase
from memtrace_otel.attribution.lineage import LineageEngine
from memtrace_otel.attribution.presence import split_header
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.instrument.variables import Variable
from memtrace_otel.spans.model import record_from_readable
from memtrace_otel.text import readable

QUESTION = "What instrument does Caroline play?"
MESSAGE = "Caroline: I have been playing the violin for ten years now."
UNITS = {  # record id -> (message, episode as extracted)
    "0a1b2c3d4e5f60718293a4b5": (MESSAGE, "Caroline has played the violin for ten years."),
    "1b2c3d4e5f60718293a4b5c6": ("Melanie: I painted a lake sunrise last year.",
                                 "Melanie painted a lake sunrise in 2022."),
    "2c3d4e5f60718293a4b5c6d7": ("Caroline: My dog Max loves long walks in the park.",
                                 "Caroline's dog Max loves long walks in the park."),
}
FACT_ID = "0a1b2c3d4e5f60718293a4b5"


def memcell(message: str, episode: str | None) -> str:
    """An EverMemOS memory unit: the messages it came from until its episode is written."""
    record: dict[str, object] = {"event_id": "e", "timestamp": "2023-05-08T13:56:00"}
    if episode is None:
        record["original_data"] = [{"content": message, "timestamp": "2023-05-08T13:56:00"}]
    else:
        record["episode"] = episode
        record["event_log"] = {"atomic_fact": [episode]}
    return json.dumps(record, indent=4)


class EverMemOS:
    """A small EverMemOS-shaped history through the real MemoryTracer."""

    def __init__(self, provider: TracerProvider) -> None:
        self.mt = MemoryTracer(provider, capture_content=True)
        self.ops: dict[str, str] = {}
        self.units: dict[str, Variable] = {}

    def remember(self, label: str, op: object) -> None:
        context = op.span_context  # type: ignore[attr-defined]
        self.ops[label] = f"op:{context.trace_id:032x}:{context.span_id:016x}"

    def ingest(self, record_id: str, message: str, episode: str) -> None:
        """The memcell stored raw (ingest), then rewritten by the extraction into its episode."""
        name = f"memory-unit-{record_id}"
        with self.mt.operation("memory_system.finalize_memory_unit", Category.INGEST) as op:
            self.remember(f"finalize {record_id}", op)
            op.read(f"msg:{record_id}", content=message, kind=VariableKind.MESSAGE)
            unit = op.write(name, memcell(message, None), kind=VariableKind.MEMORY_UNIT)
        with self.mt.operation("memory_system.extract_memory", Category.EXTRACTION) as op:
            self.remember(f"extract {record_id}", op)
            self.units[record_id] = op.update(unit, memcell(message, episode))

    def search(self, case: str, returned: list[str], *, check: bool = True) -> Variable:
        """hybrid retrieval (query -> id list), sufficiency check (list -> verdict), final rerank
        (list -> the records it keeps, as a context)."""
        with self.mt.operation("memory_system.hybrid_retrieval", Category.RETRIEVAL) as op:
            self.remember(f"hybrid {case}", op)
            op.read(f"query:{case}", content=QUESTION, kind=VariableKind.QUERY)
            for unit in self.units.values():
                op.read(unit)
            ids = ", ".join(f"{rid}-{20 - i}.0" for i, rid in enumerate(self.units))
            results = op.write(f"hybrid_retrieval_results:{case}", ids, kind=VariableKind.OTHER)
        if check:
            with self.mt.operation("memory_system.agentic_round1_bundle", Category.RETRIEVAL) as op:
                self.remember(f"round1 {case}", op)
                op.read(results)
                op.read(f"query:{case}", content=QUESTION, kind=VariableKind.QUERY)
                op.write(f"sufficiency_check_result:{case}", "False", kind=VariableKind.OTHER)
        with self.mt.operation("memory_system.agentic_final_rerank", Category.RETRIEVAL) as op:
            self.remember(f"rerank {case}", op)
            op.read(results)
            text = "\n".join(str(self.units[rid].content) for rid in returned)
            return op.write(f"context:{case}", text, kind=VariableKind.CONTEXT)

    def answer(self, case: str, context: Variable, prediction: str, gold: str = "violin") -> None:
        with self.mt.operation("question-answering", Category.EVALUATION) as op:
            self.remember(f"answer {case}", op)
            op.read(f"query:{case}", content=QUESTION, kind=VariableKind.QUERY)
            op.read(context)
            answer = op.write(f"prediction:{case}", prediction, kind=VariableKind.ANSWER)
        with self.mt.operation("llm-judge", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, question=QUESTION, prediction=prediction, gold=gold,
                                 evidence=[FACT_ID], answer=answer, case_id=case)


def verdict_of(exporter: InMemorySpanExporter, case: str = "q1") -> Attribution:
    G: nx.DiGraph = build_graph(record_from_readable(s) for s in exporter.get_finished_spans())
    evaluation = next(e for e in failed_evaluations(G) if G.nodes[e].get("case") == case)
    return LineageEngine().attribute(G, FailureCase.from_graph(G, evaluation))


def ingested(provider: TracerProvider, *, lossy: bool = False) -> EverMemOS:
    system = EverMemOS(provider)
    for rid, (message, episode) in UNITS.items():
        if lossy and rid == FACT_ID:
            episode = "Caroline talked about her hobbies."
        system.ingest(rid, message, episode)
    return system


# -- records as text ----------------------------------------------------------------------------------


def test_a_record_without_a_text_field_reads_as_what_its_parts_say():
    """An episode, its atomic facts and the messages it came from, each dated by the nearest time."""
    record = json.dumps({"event_id": "97882d1db9c74e5aaad94fe1", "timestamp": "2023-06-09T19:55:00",
                         "episode": "On 2023-06-09, Caroline gave a talk at a school.",
                         "event_log": {"atomic_fact": ["Caroline gave a talk at a school."]},
                         "original_data": [{"content": "I gave a talk last week!", "speaker_name": "Caroline",
                                            "timestamp": "2023-06-09T19:55:00"}]})
    assert readable(record).splitlines() == [
        "[9 June 2023] On 9 June 2023, Caroline gave a talk at a school.",
        "[9 June 2023] Caroline gave a talk at a school.",
        "[9 June 2023] I gave a talk last week [the week before 9 June 2023]!",
    ]


def test_a_list_of_messages_reads_as_one_dated_line_each():
    buffer = json.dumps([{"content": "I went to the group yesterday.", "timestamp": "2023-05-08T13:56:00"},
                         {"content": "Nice!", "timestamp": "2023-05-09T10:00:00"}])
    assert readable(buffer) == ("[8 May 2023] I went to the group yesterday [7 May 2023].\n"
                                "[9 May 2023] Nice!")
    assert readable("[8 May 2023] Ann: hi [waves]") == "[8 May 2023] Ann: hi [waves]"


# -- the error type of a raw memcell's loss --------------------------------------------------------------


def test_an_extraction_that_rewrote_a_raw_memcell_without_the_fact_is_an_extraction_error(
        tracer_provider, span_exporter):
    """The memcell held the message as ingested; the extraction's episode left the fact out. It wrote
    a new version, but what it did was extract: ExtractionError, not UpdateError."""
    system = ingested(tracer_provider, lossy=True)
    context = system.search("q1", [FACT_ID])
    system.answer("q1", context, "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[f"extract {FACT_ID}"], ErrorType.EXTRACTION)


def test_a_later_rewrite_of_an_extracted_memory_stays_an_update_error(tracer_provider, span_exporter):
    system = ingested(tracer_provider)
    with system.mt.operation("memory_system.extract_memory", Category.EXTRACTION) as op:
        system.remember("rewrite", op)
        system.units[FACT_ID] = op.update(system.units[FACT_ID],
                                          memcell(MESSAGE, "Caroline talked about her hobbies."))
    context = system.search("q1", [FACT_ID])
    system.answer("q1", context, "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["rewrite"], ErrorType.UPDATE)


# -- searches in steps ---------------------------------------------------------------------------------


def test_a_check_the_information_went_around_is_not_the_search_that_lost_it(tracer_provider, span_exporter):
    """The sufficiency check read the id list and wrote only a verdict; the final rerank read the same
    list and returned records without the fact: the rerank lost it."""
    system = ingested(tracer_provider)
    context = system.search("q1", ["1b2c3d4e5f60718293a4b5c6"])
    system.answer("q1", context, "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["rerank q1"], ErrorType.RETRIEVAL)


def test_the_answer_reading_another_questions_results_blames_its_own_search(tracer_provider, span_exporter):
    """MemBase links returned memories by value: q1's answerer reads the records q2's search returned
    last. q1's own final rerank (which reads no query, only q1's id list) is the search that missed
    the fact, not q2's."""
    system = ingested(tracer_provider)
    system.search("q1", ["1b2c3d4e5f60718293a4b5c6"])
    later = system.search("q2", ["2c3d4e5f60718293a4b5c6d7"], check=False)
    system.answer("q1", later, "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["rerank q1"], ErrorType.RETRIEVAL)


def test_a_context_holding_the_fact_makes_a_wrong_answer_a_response_error(tracer_provider, span_exporter):
    system = ingested(tracer_provider)
    context = system.search("q1", [FACT_ID, "1b2c3d4e5f60718293a4b5c6"])
    system.answer("q1", context, "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["answer q1"], ErrorType.RESPONSE)


# -- a boundary detector the information went around ---------------------------------------------------


def test_a_detector_that_left_the_message_in_the_buffer_is_not_the_one_that_lost_it(
        tracer_provider, span_exporter):
    """EverMemOS's buffer: the first boundary detection cut a memcell of the earlier messages and left
    the new one in the buffer, which the next update carried on; the second detection cut the memcell
    without it. The second lost it, not the first."""
    mt = MemoryTracer(tracer_provider, capture_content=True)
    ops: dict[str, str] = {}

    def remember(label: str, op: object) -> None:
        context = op.span_context  # type: ignore[attr-defined]
        ops[label] = f"op:{context.trace_id:032x}:{context.span_id:016x}"

    with mt.operation("memory_system.message_buffer_update", Category.UPDATE) as op:
        message = op.read(f"msg:{FACT_ID}", content=MESSAGE, kind=VariableKind.MESSAGE)
        buffer = op.write("message-buffer", f"Melanie: hi\n{MESSAGE}", kind=VariableKind.OTHER)
    with mt.operation("evermemos.boundary_detection", Category.EXTRACTION) as op:
        remember("first cut", op)
        op.read(buffer)
        op.write("memcell:1", "Melanie: hi", kind=VariableKind.OTHER)
    with mt.operation("memory_system.message_buffer_update", Category.UPDATE) as op:
        op.read(buffer)
        op.read("msg:x", content="Melanie: What else?", kind=VariableKind.MESSAGE)
        buffer = op.write("message-buffer", f"{MESSAGE}\nMelanie: What else?", kind=VariableKind.OTHER)
    with mt.operation("evermemos.boundary_detection", Category.EXTRACTION) as op:
        remember("second cut", op)
        op.read(buffer)
        cell = op.write("memcell:2", "Melanie: What else?", kind=VariableKind.OTHER)
    with mt.operation("memory_system.finalize_memory_unit", Category.INGEST) as op:
        op.read(cell)
        unit = op.write("memory-unit-2", "Melanie: What else?", kind=VariableKind.MEMORY_UNIT)
    with mt.operation("memory_system.hybrid_retrieval", Category.RETRIEVAL) as op:
        op.read("query:q1", content=QUESTION, kind=VariableKind.QUERY)
        op.read(unit)
        context = op.write("context:q1", str(unit.content), kind=VariableKind.CONTEXT)
    with mt.operation("question-answering", Category.EVALUATION) as op:
        op.read("query:q1", content=QUESTION, kind=VariableKind.QUERY)
        op.read(context)
        answer = op.write("prediction:q1", "I don't know.", kind=VariableKind.ANSWER)
    with mt.operation("llm-judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question=QUESTION, prediction="I don't know.", gold="violin",
                             evidence=[FACT_ID], answer=answer, case_id="q1")
    assert message.content == MESSAGE
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["second cut"], ErrorType.EXTRACTION)


# -- what the extractor wrote, followed into memory (mem0 1.x: one decision per fact) ------------------

UPDATE, DELETE, SEARCH = "update_memory", "delete_memory", "search_memory"
COUNCIL = "What did Caroline see at the council meeting for adoption?"
COUNCIL_SAID = ("[15 July 2023] Caroline: Last Friday I went to a council meeting for adoption. It was "
                "inspiring and emotional - so many people wanted to create loving homes for children "
                "in need.")
# Abstractive: no extracted fact says it.
COUNCIL_GOLD = "many people wanting to create loving homes for children in need"


def _council_history(provider: TracerProvider, *, fact: str, later: str | None, said: str = COUNCIL_SAID,
                     question: str = COUNCIL, gold: str = COUNCIL_GOLD) -> dict[str, str]:
    """Caroline's council turn (``said``) extracted as a third-person fact and added as a unit; then
    ``later``: another add's decision overwrites that unit (``"update"``), deletes it (``"delete"``) or merges
    into it keeping the fact (``"merge"``); then a search that returns the unit, a wrong answer."""
    mt = MemoryTracer(provider, capture_content=True)
    ops: dict[str, str] = {}

    def remember(label: str, op: object) -> None:
        context = op.span_context  # type: ignore[attr-defined]
        ops[label] = f"op:{context.trace_id:032x}:{context.span_id:016x}"

    with mt.operation("mem0.add.extract", Category.EXTRACTION, store_id="s") as op:
        remember("extract", op)
        message = op.read("msg:D8:9", content=said, kind=VariableKind.MESSAGE)
        facts = op.write("facts:D8:9", fact, kind=VariableKind.FACTS)
        op.step("extract", [message], [facts])
    with mt.operation("mem0.create", Category.UPDATE, gen_ai_operation="create_memory", store_id="s") as op:
        op.read(facts)
        unit = op.write("mem0:a1", fact, kind=VariableKind.MEMORY_UNIT)
    with mt.operation("mem0.add.extract", Category.EXTRACTION, store_id="s") as op:
        op.read("msg:D9:1", content="[15 October 2023] Caroline: I passed the adoption agency interviews!",
                kind=VariableKind.MESSAGE)
        other = op.write("facts:D9:1", "Caroline passed the adoption agency interviews (15 October 2023).",
                         kind=VariableKind.FACTS)
    if later == "update":
        with mt.operation("mem0.update", Category.UPDATE, gen_ai_operation=UPDATE, store_id="s") as op:
            remember("later", op)
            op.read(other)
            unit = op.update(unit, str(other.content))
    elif later == "merge":
        with mt.operation("mem0.update", Category.UPDATE, gen_ai_operation=UPDATE, store_id="s") as op:
            remember("later", op)
            op.read(other)
            unit = op.update(unit, f"{fact}; {other.content}")
    elif later == "delete":
        with mt.operation("mem0.delete", Category.DELETION, gen_ai_operation=DELETE, store_id="s") as op:
            remember("later", op)
            op.read(other)
            op.delete(unit)
    with mt.operation("mem0.search", Category.RETRIEVAL, gen_ai_operation=SEARCH, store_id="s") as op:
        op.read("query:q1", content=question, kind=VariableKind.QUERY)
        if later != "delete":
            op.read(unit)
        context = op.write("context:q1", str(unit.content) if later != "delete" else "",
                           kind=VariableKind.CONTEXT)
    with mt.operation("app.answer", Category.GENERATION) as op:
        op.read("query:q1", content=question, kind=VariableKind.QUERY)
        op.read(context)
        answer = op.write("answer:q1", "I don't know", kind=VariableKind.ANSWER)
    with mt.operation("app.judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question=question, prediction="I don't know", gold=gold,
                             evidence=["D8:9"], answer=answer, case_id="q1")
    return ops


COUNCIL_FACT = ("Caroline attended a council meeting for adoption last Friday and found it inspiring and "
                "emotional (the friday before 15 July 2023).")
# The fact in the extractor's words: it keeps one word of the gold ("children"), too little for the presence
# test.
COUNCIL_PARAPHRASE = ("Caroline attended a council meeting for adoption last Friday and found it inspiring "
                      "and emotional to see families hoping to adopt children (the friday before 15 July "
                      "2023).")


def test_a_later_overwrite_of_what_the_extractor_wrote_is_the_update_error(tracer_provider, span_exporter):
    """No unit says the gold in its words, so presence alone blames the extraction; but its statement
    about the meeting, a paraphrase of the answer, was stored, and a later update overwrote the unit with
    another fact: a repaired extraction would have been overwritten the same way. The update is the
    decisive fault."""
    ops = _council_history(tracer_provider, fact=COUNCIL_PARAPHRASE, later="update")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["later"], ErrorType.UPDATE)


def test_a_later_deletion_of_what_the_extractor_wrote_is_the_deletion_error(tracer_provider, span_exporter):
    ops = _council_history(tracer_provider, fact=COUNCIL_PARAPHRASE, later="delete")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["later"], ErrorType.DELETION)


@pytest.mark.parametrize("later", ["update", "delete"])
def test_a_later_removal_of_a_statement_without_the_answer_leaves_the_extraction_to_blame(
        tracer_provider, span_exporter, later):
    """The extractor kept the meeting and none of the words its message said of the answer ("so many
    people wanted to create loving homes for children in need"): the unit never held the answer, so the
    write that later removed it lost nothing the answer needed (its repair restores a unit without it).
    The extraction that left the answer out is the fault."""
    ops = _council_history(tracer_provider, fact=COUNCIL_FACT, later=later)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["extract"], ErrorType.EXTRACTION)


def test_a_later_removal_of_a_statement_saying_a_lone_gold_word_otherwise_is_the_update_error(
        tracer_provider, span_exporter):
    """A gold of one plain word is what a paraphrase says by a synonym ("had a great time" for "amazing"):
    the statement keeps none of the gold's words and may still say the answer, so its later overwrite
    decides, as for any paraphrase."""
    ops = _council_history(
        tracer_provider, later="update",
        said="[15 July 2023] Caroline: Last Friday I went to a council meeting for adoption. It was amazing!",
        question="How was the council meeting for adoption Caroline went to?", gold="Amazing",
        fact=("Caroline had a great time at a council meeting for adoption last Friday (the friday before "
              "15 July 2023)."))
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["later"], ErrorType.UPDATE)


def test_a_merge_that_kept_what_the_extractor_wrote_leaves_the_extraction_to_blame(
        tracer_provider, span_exporter):
    """The update merged the new fact into the unit and kept the statement: nothing removed it."""
    ops = _council_history(tracer_provider, fact=COUNCIL_FACT, later="merge")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["extract"], ErrorType.EXTRACTION)


def test_a_statement_about_another_speaker_is_the_extractions_own_fault(tracer_provider, span_exporter):
    """The extractor swapped the speaker (Melanie for Caroline): what it stored never answered the
    question about Caroline, whatever later removed it."""
    ops = _council_history(tracer_provider, fact=COUNCIL_FACT.replace("Caroline", "Melanie"), later="update")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["extract"], ErrorType.EXTRACTION)



SIMULATOR_SAID = ("[13 June 2022] James: Yes, we are currently working on a new part of the football "
                  "simulator. I was working on collecting player databases. It wasn't easy, but I did it!")
SIMULATOR = "What project is James working on in his game design course?"
SIMULATOR_GOLD = "a new part of the football simulator, collecting player databases"


@pytest.mark.parametrize("later", ["update", "delete"])
def test_a_later_removal_of_a_fragment_of_the_answer_leaves_the_extraction_to_blame(
        tracer_provider, span_exporter, later):
    """The extractor kept the sentence's part of the answer and dropped the next sentence's ("collecting
    player databases"): the unit carries the sentence's fact, but held under two thirds of what the message
    said of the answer. Removing it lost a fragment the answer could not come from; the extraction that wrote
    the fact without the rest lost the answer first."""
    ops = _council_history(tracer_provider, later=later, said=SIMULATOR_SAID, question=SIMULATOR,
                           gold=SIMULATOR_GOLD,
                           fact="James is working on a new part of the football simulator (13 June 2022).")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["extract"], ErrorType.EXTRACTION)


@pytest.mark.parametrize("later", ["update", "delete"])
def test_a_later_removal_of_the_whole_answer_is_the_removals_fault(tracer_provider, span_exporter, later):
    """The extractor kept all the message said of the answer: the later removal lost it."""
    ops = _council_history(tracer_provider, later=later, said=SIMULATOR_SAID, question=SIMULATOR,
                           gold=SIMULATOR_GOLD,
                           fact=("James is working on a new part of the football simulator, collecting "
                                 "player databases (13 June 2022)."))
    verdict = verdict_of(span_exporter)
    kind = ErrorType.UPDATE if later == "update" else ErrorType.DELETION
    assert (verdict.operation, verdict.error_type) == (ops["later"], kind)

class _Mem0:
    """mem0 1.x's write path, by hand: one extraction per message, one unit per fact, later decisions that
    overwrite or delete a unit; then one question (a search returning some units, an answer, a judge)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.mt = MemoryTracer(provider, capture_content=True)
        self.ops: dict[str, str] = {}
        self.units: dict[str, Variable] = {}

    def remember(self, label: str, op: object) -> None:
        context = op.span_context  # type: ignore[attr-defined]
        self.ops[label] = f"op:{context.trace_id:032x}:{context.span_id:016x}"

    def add(self, dia_id: str, said: str, fact: str | None, *, existing: tuple[str, ...] = (),
            shown: tuple[str, ...] = (), store: str = "s", into: str | None = None,
            merged: str | None = None) -> None:
        """``existing``: the units (by message) the decision read as the memories similar to the fact;
        ``shown``: those the extraction read (mem0 2.x shows its extractor the similar memories);
        ``into``: the unit (by message) the decision updated with the fact instead of adding one, to
        ``merged`` (else the fact); remembered as ``merge <dia_id>``."""
        with self.mt.operation("mem0.add.extract", Category.EXTRACTION, store_id=store) as op:
            self.remember(f"extract {dia_id}", op)
            message = op.read(f"msg:{dia_id}", content=said, kind=VariableKind.MESSAGE)
            for similar in shown:
                op.read(self.units[similar])
            facts = op.write(f"facts:{dia_id}", fact or "", kind=VariableKind.FACTS)
            op.step("extract", [message], [facts])
        if fact and into is not None:
            with self.mt.operation("mem0.update", Category.UPDATE, gen_ai_operation=UPDATE,
                                   store_id=store) as op:
                self.remember(f"merge {dia_id}", op)
                op.read(facts)
                self.units[into] = op.update(self.units[into], merged or fact)
        elif fact:
            with self.mt.operation("mem0.create", Category.UPDATE, gen_ai_operation="create_memory",
                                   store_id=store) as op:
                op.read(facts)
                for similar in existing:
                    op.read(self.units[similar])
                self.units[dia_id] = op.write(f"mem0:{dia_id}", fact, kind=VariableKind.MEMORY_UNIT)

    def overwrite(self, dia_id: str, text: str) -> None:
        with self.mt.operation("mem0.update", Category.UPDATE, gen_ai_operation=UPDATE, store_id="s") as op:
            self.remember(f"update {dia_id}", op)
            self.units[dia_id] = op.update(self.units[dia_id], text)

    def delete(self, dia_id: str) -> None:
        with self.mt.operation("mem0.delete", Category.DELETION, gen_ai_operation=DELETE, store_id="s") as op:
            self.remember(f"delete {dia_id}", op)
            op.delete(self.units.pop(dia_id))

    def ask(self, question: str, gold: str, evidence: list[str], returned: list[str], *,
            stores: dict[str, list[str]] | None = None, prediction: str = "I don't know") -> None:
        """``stores``: one search per store, in order, each returning the units listed (else one search of
        store ``s`` returning ``returned``); a search is remembered as ``search`` or ``search <store>``."""
        contexts = []
        for store, found_ids in (stores or {"s": returned}).items():
            with self.mt.operation("mem0.search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                                   store_id=store) as op:
                self.remember("search" if stores is None else f"search {store}", op)
                op.read("query:q1", content=question, kind=VariableKind.QUERY)
                found = [op.read(self.units[r]) for r in found_ids]
                contexts.append(op.write(f"context:q1:{store}", "\n".join(str(u.content) for u in found),
                                         kind=VariableKind.CONTEXT))
        with self.mt.operation("app.answer", Category.GENERATION) as op:
            self.remember("answer", op)
            op.read("query:q1", content=question, kind=VariableKind.QUERY)
            for context in contexts:
                op.read(context)
            answer = op.write("answer:q1", prediction, kind=VariableKind.ANSWER)
        with self.mt.operation("app.judge", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, question=question, prediction=prediction, gold=gold,
                                 evidence=evidence, answer=answer, case_id="q1")


def test_the_loss_of_what_the_evidence_extraction_wrote_comes_before_a_unit_from_elsewhere(
        tracer_provider, span_exporter):
    """The council fact was overwritten; a unit of another message with the gold's words (a reply
    quoting part of it) was deleted later. The evidence's own lineage is what the answer needed:
    its overwrite is the fault, not the deletion of a unit from elsewhere."""
    system = _Mem0(tracer_provider)
    system.add("D8:9", COUNCIL_SAID, COUNCIL_PARAPHRASE)
    system.add("D8:10", "[15 July 2023] Melanie: So many people want to create loving homes for children "
               "in need, Caroline!",
               "Caroline saw many people wanting to create loving homes for children in need (15 July 2023).")
    system.overwrite("D8:9", "Caroline passed the adoption agency interviews (15 October 2023).")
    system.delete("D8:10")
    system.ask(COUNCIL, COUNCIL_GOLD, ["D8:9"], ["D8:9"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["update D8:9"], ErrorType.UPDATE)


APTITUDE = "What test has John taken multiple times?"


def test_an_extraction_that_dropped_its_part_while_a_unit_held_the_whole_gold_is_not_decisive(
        tracer_provider, span_exporter):
    """Two evidence messages: the first's fact says the whole gold; the second's extraction wrote
    nothing. While the first unit was stored, the answer was in memory: the later deletion of that
    unit lost it, not the earlier extraction that dropped the second message's part."""
    system = _Mem0(tracer_provider)
    system.add("D3:11", "[1 January 2023] John: Especially after I failed the military aptitude test "
               "recently, I've been feeling a bit stressed out.",
               "John recently failed the military aptitude test and has been feeling stressed out "
               "(1 January 2023).")
    system.add("D8:18", "[6 March 2023] John: Last week I retook the aptitude test with some great results, "
               "and I feel drawn to serving my country in this way.", None)
    system.add("D9:1", "[2 April 2023] John: I went camping with my dog Max.",
               "John went camping with his dog Max (2 April 2023).")
    system.delete("D3:11")
    system.ask(APTITUDE, "The military aptitude test", ["D8:18", "D3:11"], ["D9:1"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["delete D3:11"], ErrorType.DELETION)


PROFESSIONAL = "When did John start playing professionally?"


def test_a_search_that_passed_over_a_message_saying_the_whole_gold_comes_before_another_messages_drop(
        tracer_provider, span_exporter):
    """Two evidence messages: the first says the whole gold (the signing, in May 2023) and its unit was alive
    when the search passed over it; the second's extraction wrote nothing of its part. The answer needed no
    other message than the first: the search that missed its unit decided, not the earlier drop of a part a
    reader given that unit would not have needed."""
    system = _Mem0(tracer_provider)
    system.add("D1:3", "[21 May 2023] John: That's great! I just signed with a new team - excited for the "
               "season!",
               "John just signed with a new team and is excited for the season (21 May 2023).")
    system.add("D1:4", "[21 May 2023] Tim: I bought a new fantasy novel.",
               "Tim bought a new fantasy novel (21 May 2023).")
    system.add("D21:4", "[6 December 2023] John: I've been playing professionally for just under a year now. "
               "It's been a wild ride.", None)
    system.ask(PROFESSIONAL, "May, 2023", ["D1:3", "D21:4"], ["D1:4"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


PENDANTS = "What symbolic gifts do Deborah and Jolene have from their mothers?"


def test_a_loss_while_another_evidence_unit_held_the_whole_gold_is_not_decisive(
        tracer_provider, span_exporter):
    """Two evidence messages each say the whole gold. Deleting the first one's unit lost nothing while the
    second's unit still said it; the later overwrite of that unit lost the answer, and is the fault,
    not the earlier deletion."""
    system = _Mem0(tracer_provider)
    system.add("D1:8", "[23 January 2023] Jolene: I have a pendant that reminds me of my mother.",
               "Jolene has a pendant that reminds her of her mother (23 January 2023).")
    system.add("D1:9", "[23 January 2023] Deborah: I have a pendant that reminds me of my mother too.",
               "Deborah has a pendant that reminds her of her mother (23 January 2023).")
    system.add("D2:1", "[25 January 2023] Deborah: I went to the beach with my husband.",
               "Deborah went to the beach with her husband (25 January 2023).")
    system.delete("D1:8")
    system.overwrite("D1:9", "Deborah started a yoga class for the neighbours (26 August 2023).")
    system.ask(PENDANTS, "pendants", ["D1:8", "D1:9"], ["D2:1"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["update D1:9"], ErrorType.UPDATE)


PIANO = "Which movie's theme is Tim's favorite to play on the piano?"


def test_the_loss_of_a_unit_stating_the_whole_gold_competes_though_its_message_did_not_say_it(
        tracer_provider, span_exporter):
    """A photo turn's message does not say the gold; the extractor's fact written from it does. The other
    evidence message's unit (the gold less a word) was deleted first, while the photo turn's unit still said
    the whole answer; that unit's later deletion lost it."""
    system = _Mem0(tracer_provider)
    system.add("D8:14", "[21 August 2023] Tim: [shares a photo of sheet music] This is my favourite piece to "
               "play on the piano right now.",
               "Tim's favorite song to play on the piano is a theme from the movie Harry Potter and the "
               "Philosopher's Stone (21 August 2023).")
    system.add("D8:16", "[21 August 2023] Tim: Yeah, Harry Potter and the Philosopher's Stone is special to "
               "me.",
               "Tim mentioned that Harry Potter and the Philosopher's is special to Tim (21 August 2023).")
    system.add("D9:2", "[28 August 2023] Tim: I went to a castle in Scotland last week.",
               "Tim visited a castle in Scotland (the week before 28 August 2023).")
    system.delete("D8:16")
    system.delete("D8:14")
    system.ask(PIANO, "\"Harry Potter and the Philosopher's Stone\"", ["D8:14", "D8:16"], ["D9:2"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["delete D8:14"], ErrorType.DELETION)


DANCE = "What does Jon's dance make him?"


@pytest.mark.parametrize(("said_on", "blamed", "error_type"), [
    ("9 April 2023", "update D9:4", ErrorType.UPDATE),
    ("2 January 2023", "extract D9:5", ErrorType.EXTRACTION),
])
def test_the_later_removal_of_a_unit_of_the_evidences_day_stating_the_answer_decided(
        tracer_provider, span_exporter, said_on, blamed, error_type):
    """The evidence turn's extraction stored nothing of "dancing makes me so happy"; the other speaker's turn
    before it ("you look so happy when you dance!") was stored, and a wrong update overwrote it later. The
    day's turns talk about one thing: while that unit was stored memory held the answer, and the overwrite,
    not the extraction, lost it. The same words said on another day are another occasion's: the extraction
    stays at fault."""
    system = _Mem0(tracer_provider)
    system.add("D9:4", f"[{said_on}] Gina: Wow Jon, you look so happy when you dance!",
               f"Gina mentioned that wow Jon, you look so happy when you dance! ({said_on}).")
    system.add("D9:5", "[9 April 2023] Jon: Yeah, Gina! It's been tough, but I'm living my true self. "
               "Dancing makes me so happy, and now I get to share that with other people.", None)
    system.add("D10:2", "[25 April 2023] Jon: I signed the lease for the new studio space.",
               "Jon signed the lease for a new studio space (25 April 2023).")
    system.overwrite("D9:4", "Gina advises Jon to focus on the big goal, get support, and dance it out to "
                     "stay motivated during tough times in business (25 April 2023).")
    system.ask(DANCE, "happy", ["D9:5"], ["D10:2"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


_HURT = ("Melanie had a setback due to an injury that led her to take a break from pottery, which she uses "
         "for self-expression and peace (September 2023).")
_CAMPING = ("[13 October 2023] Melanie: We went camping with the kids last weekend.",
            "Melanie went camping with her kids (October 2023).")


@pytest.mark.parametrize(("fact", "beside", "blamed", "error_type"), [
    ("Melanie got hurt and had to take a break from pottery, which she uses for self-expression and peace "
     "(September 2023).", _CAMPING, "search", ErrorType.RETRIEVAL),
    (_HURT, _CAMPING, "extract D17:8", ErrorType.EXTRACTION),
    (_HURT, ("[13 October 2023] Melanie: Getting hurt was hard, but the kids cheered me up.",
             "Melanie found getting hurt hard, but her kids cheered her up (13 October 2023)."),
     "search", ErrorType.RETRIEVAL),
])
def test_a_date_is_carried_only_with_the_event_the_question_asks_it_of(
        tracer_provider, span_exporter, fact, beside, blamed, error_type):
    """"When did Melanie get hurt?": the message dates the event in the question's words ("I got hurt").
    A fact that keeps them and the date, stored and not returned, was missed by the search. One that keeps
    the date and the rest of the sentence but tells the event in other words ("a setback due to an
    injury") no longer says what the date is of, as the question asks it: the extraction lost it, unless
    a unit of that day tells the event in the question's words (the turn beside it): memory still held
    the event and its date, and the search that passed over the dated unit is blamed."""
    system = _Mem0(tracer_provider)
    system.add("D17:8", "[13 October 2023] Melanie: BTW, recently I had a setback. Last month [September "
               "2023] I got hurt and had to take a break from pottery, which I use for self-expression and "
               "peace.", fact)
    system.add("D17:9", *beside)
    system.ask("When did Melanie get hurt?", "September 2023", ["D17:8"], ["D17:9"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


SAMANTHA = "Whose phone number did James receive during the beach outing?"
SAMANTHA_FACT = ("James is considering asking a girl named Samantha out on a date after they met at the "
                 "beach outing (11 August 2022).")


def test_a_merge_that_kept_the_evidences_statement_word_for_word_still_carries_it(
        tracer_provider, span_exporter):
    """The evidence's fact (the gold, a name, in the extractor's words only) was written into a unit; a later
    decision merged another fact into that unit, keeping the statement word for word; a third overwrote it.
    The merge lost nothing: the overwrite is the fault."""
    system = _Mem0(tracer_provider)
    system.add("D18:2", "[6 August 2022] James: Leaving after years is a big step.",
               "James mentioned that leaving after years is a big step (6 August 2022).")
    system.add("D19:14", "[10 August 2022] James: Yes, we had fun and I even met one beautiful girl. I'm "
               "thinking of asking her out on a date! She left me her phone number, I think I'll call "
               "tomorrow.",
               SAMANTHA_FACT, into="D18:2")
    system.add("D21:3", "[3 September 2022] James: I asked Samantha to be my girlfriend at the theater!",
               "James asked Samantha to be his girlfriend at the theater (3 September 2022).", into="D18:2",
               merged=SAMANTHA_FACT.removesuffix(".") + "; James asked Samantha to be his girlfriend at the "
               "theater (3 September 2022).")
    system.add("D23:3", "[4 September 2022] James: We went to McGee's bar and she loves lager beer.",
               "James and his girlfriend went to McGee's bar (4 September 2022).", into="D18:2")
    system.add("D24:1", "[5 September 2022] James: I played football with my friends.",
               "James played football with his friends (5 September 2022).")
    system.ask(SAMANTHA, "Samantha", ["D19:14"], ["D24:1"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["merge D23:3"], ErrorType.UPDATE)


SHELTER = "What community service did Maria mention that she was involved in on 31 July, 2023?"


def test_a_merge_dated_by_the_newer_message_still_carries_the_fact_of_the_day_the_question_names(
        tracer_provider, span_exporter):
    """The question names the day the evidence was said ("mention ... on 31 July, 2023"). A later decision
    merged another fact into the evidence's unit, cut its date off and dated the merge by the newer
    message: the statement the evidence put there ("Maria dropped off baked goods at a homeless shelter")
    is still in it, and the day the question names is when it was said, which the app keeps in the
    record. The unit was alive and the search returned another: the search missed it, the merge lost
    nothing."""
    system = _Mem0(tracer_provider)
    system.add("D26:1", "[31 July 2023] Maria: Some interesting stuff has been going on; last week [the week "
               "before 31 July 2023] I dropped off that stuff I baked at the homeless shelter.",
               "Maria dropped off baked goods at a homeless shelter last week (the week before 31 July "
               "2023).")
    system.add("D28:2", "[3 August 2023] Maria: I took my dog for a walk in the park.",
               "Maria took her dog for a walk in the park (3 August 2023).")
    system.add("D29:1", "[9 August 2023] Maria: Last week [the week before 9 August 2023] I got a medal for "
               "volunteering at the homeless shelter!",
               "Maria volunteered at a homeless shelter last week and received a medal for her help (the "
               "week before 9 August 2023).", into="D26:1",
               merged="Maria dropped off baked goods at a homeless shelter; Maria volunteered at a homeless "
               "shelter last week and received a medal for her help (the week before 9 August 2023).")
    system.ask(SHELTER, "volunteered at a homeless shelter", ["D26:1"], ["D28:2"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


def test_a_later_search_that_passed_over_the_answer_beats_one_that_missed_a_turn_saying_none_of_it(
        tracer_provider, span_exporter):
    """The evidence id names John's turn beside Maria's, and it says none of the gold ("let me know if you
    need any advice"); John's search passed over its unit. Maria's own turn said the answer ("I'm off to bake
    some cakes"), stored as Maria's memory, and Maria's search, which ran after John's, passed over it too.
    John's unit returned would not have given the reader the answer; Maria's would: her search failed."""
    system = _Mem0(tracer_provider)
    system.add("D25:18", "[22 July 2023] Maria: I'm off to bake some cakes, then maybe I'll try yoga!",
               "Maria is off to bake some cakes after the conversation (22 July 2023).", store="maria")
    system.add("D25:19", "[22 July 2023] John: Yeah, it's been great for me. Let me know if you need any "
               "advice to get started.",
               "John mentioned that let John know if you need any advice to get started (22 July 2023).",
               store="john")
    system.add("D26:5", "[31 July 2023] John: I went camping with my family.",
               "John went camping with his family (31 July 2023).", store="john")
    system.add("D26:6", "[31 July 2023] Maria: I adopted a puppy named Coco!",
               "Maria adopted a puppy named Coco (31 July 2023).", store="maria")
    system.ask("What food item did Maria drop off at the homeless shelter?", "Cakes", ["D25:19"], [],
               stores={"john": ["D26:5"], "maria": ["D26:6"]})
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search maria"], ErrorType.RETRIEVAL)


@pytest.mark.parametrize(("maria_said", "maria_fact", "blamed"), [
    ("[1 January 2023] Maria: Last month I took a sunset picture at the beach, it made me feel so calm.",
     "Maria took a peaceful sunset picture at the beach last month (December 2022).", "search maria"),
    ("[20 December 2022] Maria: Today I took a sunset picture at the beach, it made me feel so calm.",
     "Maria took a peaceful sunset picture at the beach (20 December 2022).", "search john"),
])
def test_a_date_a_memory_told_apart_from_its_day_states_the_answer_beside_a_turn_saying_none(
        tracer_provider, span_exporter, maria_said, maria_fact, blamed):
    """The evidence id names John's reply beside Maria's turn, and it says no date ("I took plenty of beach
    pics as a kid"); John's search, the first, passed over its unit. Maria's store held her turn's unit
    dated December 2022 while her message was said on 1 January 2023: "last month", resolved, is what her
    sentence told, so the unit states the answer, and her search, which passed over it, failed. Said on 20
    December, the date is the day every fact of that message holds: no sign the unit states the answer, and
    John's search stays at fault."""
    system = _Mem0(tracer_provider)
    system.add("D3:14", maria_said, maria_fact, store="maria")
    system.add("D3:15", "[1 January 2023] John: Wow, nature can be so beautiful! It reminds me of the film "
               "camera I had as a kid, I took plenty of beach pics.",
               "John had a film camera as a kid and took plenty of beach pics (1 January 2023).",
               store="john")
    system.add("D4:1", "[8 January 2023] John: I started a new job at the bank.",
               "John started a new job at the bank (8 January 2023).", store="john")
    system.add("D4:2", "[8 January 2023] Maria: I adopted a puppy named Coco!",
               "Maria adopted a puppy named Coco (8 January 2023).", store="maria")
    system.ask("When did Maria go to the beach?", "December 2022", ["D3:15"], [],
               stores={"john": ["D4:1"], "maria": ["D4:2"]})
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], ErrorType.RETRIEVAL)


def test_a_search_that_missed_the_alive_unit_holding_what_the_extractor_wrote_is_the_retrieval_error(
        tracer_provider, span_exporter):
    """No unit says the abstractive gold in its words, but the council fact the extraction wrote was
    still stored, unchanged, when the question was asked, and the search returned another memory:
    the information was in memory and the search missed it."""
    system = _Mem0(tracer_provider)
    system.add("D8:9", COUNCIL_SAID, COUNCIL_FACT)
    system.add("D9:1", "[15 October 2023] Caroline: I passed the adoption agency interviews!",
               "Caroline passed the adoption agency interviews (15 October 2023).")
    system.ask(COUNCIL, COUNCIL_GOLD, ["D8:9"], ["D9:1"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


def test_an_answer_from_a_context_holding_the_extracted_statement_with_the_whole_gold_is_the_response_error(
        tracer_provider, span_exporter):
    """The extraction's statement says the gold ("sunset") in other words than the message's sentence
    stating it; it was stored, the search returned it, the reader answered wrong: ResponseError."""
    system = _Mem0(tracer_provider)
    system.add("D28:22", "[9 November 2022] Joanna: I took that pic on a hike last summer near Fort Wayne. "
               "The sunset and the surrounding beauty were just incredible.",
               "Joanna took a beautiful sunset picture on a hike near Fort Wayne last summer "
               "(9 November 2022).")
    system.add("D28:23", "[9 November 2022] Joanna: My cat Luna slept all day.",
               "Joanna's cat Luna slept all day (9 November 2022).")
    for n, place in enumerate(("the lake", "the beach", "the park", "my window", "the hills")):
        # A common gold word: the sentence stating it, not the word alone, would identify the fact.
        system.add(f"D29:{n}", f"[10 November 2022] Nate: I watched the sunset at {place} with my turtles.",
                   f"Nate watched the sunset at {place} with his turtles (10 November 2022).")
    system.ask("What did Joanna take a picture of near Fort Wayne last summer?", "Sunset", ["D28:22"],
               ["D28:23", "D28:22"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["answer"], ErrorType.RESPONSE)


def test_a_message_passed_on_word_for_word_is_not_a_statement_the_extractor_wrote(
        tracer_provider, span_exporter):
    """A boundary detector cut a memcell holding the earlier messages as said (one of them about the
    question, not saying the answer) and dropped the evidence's. That memcell staying in memory says
    nothing about what the extractor wrote: the drop stays an ExtractionError, not a search's miss."""
    mt = MemoryTracer(tracer_provider, capture_content=True)
    asked = "What programming languages has James worked with?"
    earlier = "[17 March 2022] John: Which programming languages have you worked with, James?"
    with mt.operation("evermemos.boundary_detection", Category.EXTRACTION) as op:
        context = op.span_context
        detector = f"op:{context.trace_id:032x}:{context.span_id:016x}"
        op.read("msg:D1:7", content=earlier, kind=VariableKind.MESSAGE)
        op.read("msg:D1:8", content="[17 March 2022] James: I have worked with Python and C++ so far.",
                kind=VariableKind.MESSAGE)
        cell = op.write("memcell:1", earlier, kind=VariableKind.OTHER)
    with mt.operation("memory_system.finalize_memory_unit", Category.INGEST) as op:
        op.read(cell)
        unit = op.write("memory-unit-1", earlier, kind=VariableKind.MEMORY_UNIT)
    with mt.operation("memory_system.hybrid_retrieval", Category.RETRIEVAL) as op:
        op.read("query:q1", content=asked, kind=VariableKind.QUERY)
        op.read("memory-unit-0", content="James likes dogs.", kind=VariableKind.MEMORY_UNIT)
        retrieved = op.write("context:q1", "James likes dogs.", kind=VariableKind.CONTEXT)
    with mt.operation("question-answering", Category.EVALUATION) as op:
        op.read("query:q1", content=asked, kind=VariableKind.QUERY)
        op.read(retrieved)
        answer = op.write("prediction:q1", "I don't know.", kind=VariableKind.ANSWER)
    with mt.operation("llm-judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question=asked, prediction="I don't know.", gold="Python and C++",
                             evidence=["D1:8"], answer=answer, case_id="q1")
    assert unit.content == earlier
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (detector, ErrorType.EXTRACTION)


def test_an_extraction_that_wrote_only_about_other_things_yields_to_a_search_that_missed_the_fact(
        tracer_provider, span_exporter):
    """Two evidence messages: the earlier one's extraction wrote a fact about something else (the
    evidence id names a turn beside the one saying the answer); the later one's fact was stored and
    the search missed it. The earlier extraction did not drop this fact: the search is to blame."""
    system = _Mem0(tracer_provider)
    for n, thing in enumerate(("pottery", "her garden", "a new book", "the rain", "her guitar", "lunch")):
        # The rest of the session, dated like every fact of that day.
        system.add(f"D8:{n}", f"[15 July 2023] Caroline: Let me tell you about {thing}.",
                   f"Caroline talked about {thing} (15 July 2023).")
    system.add("D8:8", "[15 July 2023] Caroline: So many people came! My dog Max loved the beach.",
               "Caroline's dog Max loved the beach (15 July 2023).")
    system.add("D8:9", COUNCIL_SAID, COUNCIL_FACT)
    system.add("D9:1", "[15 October 2023] Caroline: I passed the adoption agency interviews!",
               "Caroline passed the adoption agency interviews (15 October 2023).")
    system.ask(COUNCIL, COUNCIL_GOLD, ["D8:8", "D8:9"], ["D9:1"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


def test_a_search_that_missed_a_later_copy_of_a_fact_an_extraction_dropped_is_the_retrieval_error(
        tracer_provider, span_exporter):
    """The evidence's extraction kept only the sister, not Barcelona; a later message said the trip again,
    and the decision that stored it read the evidence's unit as a similar memory (the later saying is
    tied to the evidence's lineage). That unit was still stored when the question was asked, and the
    search returned another memory: the information was in memory, so the search that passed over it
    is the fault, not the earlier drop (a repaired extraction's unit would have met the same search).
    Without such a tie, a unit sharing the gold's word stays no excuse for the drop
    (test_attribution_lineage's later copy of a chunk)."""
    system = _Mem0(tracer_provider)
    system.add("D3:1", "[1 March 2023] John: I finally booked my summer trip to Barcelona! My sister is "
               "coming along.", "John's sister is coming along on his summer trip (1 March 2023).")
    system.add("D4:2", "[2 April 2023] John: I went camping with my dog Max.",
               "John went camping with his dog Max (2 April 2023).")
    system.add("D5:2", "[3 May 2023] John: Only two months until my summer trip to Barcelona.",
               "John is going on a summer trip to Barcelona in two months (3 May 2023).", existing=("D3:1",))
    system.ask("Where is John going on his summer trip?", "Barcelona", ["D3:1"], ["D4:2"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


WITCHER_SAID = ("[13 October 2022] James: Playing video games was always great, but creating my own game was "
                "really special. Witcher 3 gave me a ton of inspiration, with its amazing world and story.")


@pytest.mark.parametrize(("other", "blamed", "error_type"), [
    ("John is interested in James' inspiration behind creating his game, mentioning The Witcher 3 "
     "(13 October 2022).", "answer", ErrorType.RESPONSE),
    ("John mentioned that The Witcher 3 is his favourite game to relax with (13 October 2022).",
     "update D27:6", ErrorType.UPDATE),
])
def test_a_context_line_of_another_message_that_answers_as_the_evidence_does_gave_the_reader_the_fact(
        tracer_provider, span_exporter, other, blamed, error_type):
    """The evidence's unit was overwritten before the question; the reader's context held another
    message's memory. One that answers as the evidence does (the whole gold and every word of the question
    the evidence sentence holds: James, inspired, create, game) gave the reader the answer, whichever turn
    it was written from: the reader is at fault. One with only the gold's words (the same game, another
    fact) did not, and the overwrite is the first loss."""
    system = _Mem0(tracer_provider)
    system.add("D27:5", "[13 October 2022] John: So cool that people are enjoying it! What inspired you to "
               "create it?", other)
    system.add("D27:6", WITCHER_SAID, "The game Witcher 3 inspired James to create his own game, pushing him "
               "to make something special (13 October 2022).")
    system.overwrite("D27:6", "James wants to make more games in different genres (13 October 2022).")
    system.ask("What inspired James to create his game?", "Witcher 3", ["D27:6"], ["D27:5"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


@pytest.mark.parametrize(("copy", "blamed", "error_type"), [
    ("Tim loved the history of the castle he visited in the UK (9 June 2023).", "search",
     ErrorType.RETRIEVAL),
    ("Tim's pottery class, his new job at the bank, his marathon training, his sister's wedding and the "
     "history of the UK castle he loved keep him busy (9 June 2023).", "delete D2:3", ErrorType.DELETION),
])
def test_a_loss_on_the_evidence_lineage_is_decisive_only_if_the_search_would_have_found_the_lost_unit(
        tracer_provider, span_exporter, copy, blamed, error_type):
    """The evidence's castle fact was deleted; another message's unit naming the UK was alive when the
    question was asked, and the search passed over it. A copy as close to the question as the lost unit
    would have been passed over like it: the search decided the answer. A copy farther from the question
    than the lost unit (the castle among four other things) was no sign that the search would have
    passed over the lost unit too: the deletion decided."""
    system = _Mem0(tracer_provider)
    system.add("D2:3", "[5 May 2023] Tim: Last Friday I visited a castle in the UK and loved its history.",
               "Tim visited a castle in the UK last Friday and loved its history "
               "(the friday before 5 May 2023).")
    system.add("D3:1", "[2 June 2023] Tim: I went camping with my dog Max.",
               "Tim went camping with his dog Max (2 June 2023).")
    system.add("D4:1", "[9 June 2023] Tim: Back from the UK!", copy)
    system.delete("D2:3")
    system.ask("Which country did Tim visit a castle in?", "UK", ["D2:3"], ["D3:1"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


SNACKS_SAID = ("[6 June 2023] Sam: Nah, no changes for me. Still enjoying my soda and candy, although I know "
               "it's not the best habit to have.")


@pytest.mark.parametrize(("tied", "blamed", "error_type"), [
    ("Sam agreed to try swapping soda for flavored seltzer water and candy for dark chocolate (6 June 2023).",
     "update D3:4", ErrorType.UPDATE),
    ("Sam still enjoys soda and candy as his favourite unhealthy snacks (6 June 2023).", "search",
     ErrorType.RETRIEVAL),
])
def test_a_unit_tied_to_the_evidence_excuses_its_loss_only_if_the_search_would_have_passed_over_both(
        tracer_provider, span_exporter, tied, blamed, error_type):
    """The evidence's own unit (Sam still enjoys soda and candy) was overwritten before the question. A unit
    another turn's decision wrote after reading it is on the evidence's lineage and holds the gold's words,
    and the search passed over it. When it tells that other turn's fact (swapping soda and candy for
    something healthier), farther from the question than the lost unit, the search would have found the
    lost unit: the overwrite decided. When it is as close to the question, the search would have passed
    over the lost unit too: the search decided."""
    system = _Mem0(tracer_provider)
    system.add("D3:4", SNACKS_SAID, "Sam still enjoys soda and candy, although he knows it's not the best "
               "habit (6 June 2023).")
    system.add("D3:5", "[6 June 2023] Evan: You could swap soda for seltzer and candy for dark chocolate.",
               tied, existing=("D3:4",))
    system.add("D3:7", "[6 June 2023] Sam: I went camping with my dog Max.",
               "Sam went camping with his dog Max (6 June 2023).")
    system.overwrite("D3:4", "Sam is training for a marathon in the autumn (27 July 2023).")
    system.ask("What kind of unhealthy snacks does Sam enjoy eating?", "soda, candy", ["D3:4"], ["D3:7"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


PROJECTS_FACT = ("Jolene aims to work on projects involving renewable energy like solar and providing clean "
                 "water to those with limited access (26 August 2023).")


@pytest.mark.parametrize(("compared", "blamed", "error_type"), [
    ("D22:10", "search", ErrorType.RETRIEVAL),
    ("D22:11", "extract D22:12", ErrorType.EXTRACTION),
])
def test_an_extraction_whose_statement_the_decision_found_stored_already_dropped_nothing(
        tracer_provider, span_exporter, compared, blamed, error_type):
    """Jolene named both projects one turn earlier, and that turn's unit says them. The evidence turn's
    extraction wrote the same statement; the update decision that read its facts was shown the similar
    memories and wrote nothing: the statement was in memory already (a deduplication), and the search
    that passed over that unit is the fault. When the decision was shown other memories only, nothing
    ties the earlier unit to this statement: the extraction's facts made no unit, and it stays to blame."""
    system = _Mem0(tracer_provider)
    system.add("D22:10", "[26 August 2023] Jolene: I'm keen on two projects: renewable energy like solar, "
               "and clean water for those with limited access.", PROJECTS_FACT)
    system.add("D22:11", "[26 August 2023] Jolene: I went camping with my dog Max.",
               "Jolene went camping with her dog Max (26 August 2023).")
    with system.mt.operation("mem0.add.extract", Category.EXTRACTION, store_id="s") as op:
        system.remember("extract D22:12", op)
        message = op.read("msg:D22:12", content="[26 August 2023] Jolene: The other is finding ways to "
                          "supply clean water to those with limited access.", kind=VariableKind.MESSAGE)
        facts = op.write("facts:D22:12", PROJECTS_FACT, kind=VariableKind.FACTS)
        op.step("extract", [message], [facts])
    with system.mt.operation("mem0.add.decide", Category.UPDATE, store_id="s") as op:
        op.read(facts)
        op.read(system.units[compared])
        op.write("decisions:D22:12", '[{"event": "NONE"}]', kind=VariableKind.OTHER)
    system.ask("What projects is Jolene planning for next year?", "finding ways to supply clean water to "
               "those with limited access", ["D22:12"], ["D22:11"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


CAMPED = "Where has Melanie camped?"
CAMPING_SAID = ("[27 June 2023] Melanie: That sounds great! Actually, I just took my fam camping in the "
                "mountains last week - it was a really nice time together!")


def _camping(provider: TracerProvider, later: str) -> _Mem0:
    """The evidence's extraction wrote no fact; two turns later Melanie said the trip again and its fact was
    stored by a decision that read nothing of the evidence (no tie); the search returned other memories."""
    system = _Mem0(provider)
    system.add("D4:6", CAMPING_SAID, None)
    system.add("D4:7", "[27 June 2023] Caroline: I went to a pottery class with my sister.",
               "Caroline went to a pottery class with her sister (27 June 2023).")
    system.add("D4:8", "[27 June 2023] Melanie: We roasted marshmallows in the mountains.", later)
    system.ask(CAMPED, "mountains", ["D4:6"], ["D4:7"])
    return system


@pytest.mark.parametrize(("later", "blamed", "error_type"), [
    ("Melanie went camping with her family in the mountains last week and roasted marshmallows "
     "(27 June 2023).", "search", ErrorType.RETRIEVAL),
    ("Melanie's pottery class, her new job at the bank, her marathon training, her sister's wedding and "
     "the marshmallows in the mountains keep her busy (27 June 2023).", "extract D4:6", ErrorType.EXTRACTION),
])
def test_a_drop_is_decisive_only_if_the_search_would_have_returned_the_repaired_fact(
        tracer_provider, span_exporter, later, blamed, error_type):
    """A unit from another turn saying the fact was alive and the search passed over it. A repaired
    extraction's fact would have been no closer to the question than that unit (the message's sentence
    stands for it): the search would have passed it over too, and the search decided the answer. A unit
    farther from the question than the message's sentence (the mountains among four other things) is no
    sign of that: the drop decided."""
    system = _camping(tracer_provider, later)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


@pytest.mark.parametrize(("reply", "blamed"), [
    ("Joanna loves Nate's turtles and would get two today if she could (18 March 2022).", "search joanna"),
    ("Joanna loves Nate's dog and would get one today if she could (18 March 2022).", "search nate"),
])
def test_an_earlier_search_that_passed_over_a_unit_saying_the_whole_answer_failed_first(
        tracer_provider, span_exporter, reply, blamed):
    """One search per speaker, Joanna's first. Nate's store held the evidence's fact and his search missed
    it; Joanna's store held her reply saying the whole answer of Nate, and her search, earlier, missed it:
    the earliest faulty operation is hers. A reply without the answer leaves Nate's search to blame."""
    system = _Mem0(tracer_provider)
    system.add("D5:6", "[18 March 2022] Nate: I'm drawn to turtles. They're unique and calming.",
               "Nate finds turtles unique and calming (18 March 2022).", store="nate")
    system.add("D5:7", "[18 March 2022] Nate: I went to the cinema with my friends.",
               "Nate went to the cinema with his friends (18 March 2022).", store="nate")
    system.add("D5:11", "[18 March 2022] Joanna: I love your turtles, I'd get two today if I could!", reply,
               store="joanna")
    system.add("D5:12", "[18 March 2022] Joanna: I finished my screenplay.",
               "Joanna finished her screenplay (18 March 2022).", store="joanna")
    system.ask("What animal do both Nate and Joanna like?", "Turtles", ["D5:6"], [],
               stores={"joanna": ["D5:12"], "nate": ["D5:7"]})
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], ErrorType.RETRIEVAL)


@pytest.mark.parametrize(("reply", "blamed"), [
    ("Joanna loves Nate's three turtles and wants to meet them (18 March 2022).", "search joanna"),
    ("Joanna loves Nate's turtles and wants to meet them (3 March 2022).", "search nate"),
    ("Joanna loves Nate's turtles and wants to meet them (March 3, 2022).", "search nate"),
])
def test_the_day_of_a_memorys_date_does_not_say_a_count(tracer_provider, span_exporter, reply, blamed):
    """One search per speaker, Joanna's first; Nate's search missed the evidence's unit. Joanna's store held
    her reply about his turtles: saying "three" of them, it states the whole answer and her earlier search
    failed first. Dated the third of March, it says when she said it, not how many turtles: no answer there,
    and Nate's search stays at fault."""
    system = _Mem0(tracer_provider)
    system.add("D5:6", "[18 March 2022] Nate: I have three turtles now. They're unique and calming.",
               "Nate has three turtles and finds them calming (18 March 2022).", store="nate")
    system.add("D5:7", "[18 March 2022] Nate: I went to the cinema with my friends.",
               "Nate went to the cinema with his friends (18 March 2022).", store="nate")
    system.add("D2:11", "[3 March 2022] Joanna: I love your turtles, I want to meet them!", reply,
               store="joanna")
    system.add("D5:12", "[18 March 2022] Joanna: I finished my screenplay.",
               "Joanna finished her screenplay (18 March 2022).", store="joanna")
    system.ask("How many turtles does Nate have?", "Three", ["D5:6"], [],
               stores={"joanna": ["D5:12"], "nate": ["D5:7"]})
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], ErrorType.RETRIEVAL)


@pytest.mark.parametrize(("jolene_returned", "blamed", "error_type"), [
    (["D23:2"], "search jolene", ErrorType.RETRIEVAL),
    (["D23:1"], "answer", ErrorType.RESPONSE),
])
def test_a_search_that_returned_the_unit_is_not_the_miss_another_evidence_search_made(
        tracer_provider, span_exporter, jolene_returned, blamed, error_type):
    """One search per speaker, Deborah's first, and an evidence message of each. Deborah's search returned
    her unit saying she was in Rio; Jolene's passed over hers. A unit alive in the store that the search
    returned is no sign that the search missed it: Jolene's search, which left her unit out, is to blame,
    not the earlier one. With both units returned, no search missed anything: the reader is to blame."""
    system = _Mem0(tracer_provider)
    system.add("D23:1", "[30 August 2023] Jolene: Yesterday my partner and I got back from an awesome "
               "trip to Rio de Janeiro.",
               "Jolene went on a trip to Rio de Janeiro with her partner (29 August 2023).", store="jolene")
    system.add("D23:2", "[30 August 2023] Jolene: I bought a new yoga mat for my classes.",
               "Jolene bought a new yoga mat for her classes (30 August 2023).", store="jolene")
    system.add("D23:18", "[30 August 2023] Deborah: Three years ago I was also in Rio de Janeiro, I took a "
               "beautiful photo on one of the excursions.",
               "Deborah took a beautiful photo on an excursion in Rio de Janeiro three years ago (2020).",
               store="deborah")
    system.ask("Have Deborah and Jolene been to Rio de Janeiro?", "yes", ["D23:18", "D23:1"], [],
               stores={"deborah": ["D23:18"], "jolene": jolene_returned},
               prediction="Deborah took a beautiful photo on an excursion in Rio de Janeiro")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


@pytest.mark.parametrize(("sam_returned", "blamed"), [(["D13:6"], "search sam"), ([], "search evan")])
def test_a_search_that_missed_a_carrier_another_search_returned_decided_nothing(
        tracer_provider, span_exporter, sam_returned, blamed):
    """One search per speaker, Evan's first. Sam's kayaking is stored once, from D13:6 (his extractor, shown
    it, wrote nothing new for D13:8); Evan's store held his reply naming it, and his search passed it over.
    Sam's search returned the kayaking unit and passed over the painting: the reader had the kayaking either
    way, so Evan's miss decided nothing and Sam's search is to blame. Had Sam's search not returned the
    kayaking either, Evan's earlier miss is the first fault."""
    system = _Mem0(tracer_provider)
    system.add("D1:11", "[20 May 2023] Sam: Nothing so far, but I was thinking about trying painting.",
               "Sam is thinking about trying painting (20 May 2023).", store="sam")
    system.add("D13:6", "[14 October 2023] Sam: Thinking about trying something different outdoors.",
               "Sam is considering trying kayaking as a new outdoor activity (14 October 2023).", store="sam")
    system.add("D13:8", "[14 October 2023] Sam: Kayaking sounds awesome! Haven't tried it yet, but it looks "
               "like a fun way to get in some exercise and enjoy nature.", None, shown=("D13:6",),
               store="sam")
    system.add("D13:9", "[14 October 2023] Evan: I know a good spot for kayaking, I'll hook you up, Sam!",
               "Evan offered to hook Sam up with a good spot for kayaking (14 October 2023).", store="evan")
    system.add("D13:11", "[14 October 2023] Evan: My knee is much better now.",
               "Evan's knee is much better (14 October 2023).", store="evan")
    system.ask("What new hobbies did Sam consider trying?", "Painting, kayaking", ["D1:11", "D13:6", "D13:8"],
               [], stores={"evan": ["D13:11"], "sam": sam_returned})
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], ErrorType.RETRIEVAL)


@pytest.mark.parametrize(("johns_unit", "blamed", "error_type"), [
    ("Tim enjoys fantasy books like Harry Potter and Game of Thrones (21 November 2023).", "answer",
     ErrorType.RESPONSE),
    ("Tim enjoys fantasy books like Harry Potter (21 November 2023).", "search tim", ErrorType.RETRIEVAL),
])
def test_a_search_miss_is_not_decisive_when_another_search_returned_a_unit_saying_the_whole_answer(
        tracer_provider, span_exporter, johns_unit, blamed, error_type):
    """One search per speaker, Tim's first; Tim's search passed over the unit written from the evidence.
    John's search returned a unit of another message saying the whole answer of Tim (with a word of the
    question): the reader had the answer, so the miss decided nothing and the reader is to blame. A unit
    with only part of the answer shows no such thing: Tim's search stays at fault."""
    system = _Mem0(tracer_provider)
    system.add("D4:7", "[2 August 2023] Tim: Harry Potter and Game of Thrones are amazing - I'm totally "
               "hooked! I write about them for an online magazine.",
               "Tim loves writing about Harry Potter and Game of Thrones (2 August 2023).", store="tim")
    system.add("D4:9", "[2 August 2023] Tim: I went to a castle last week.",
               "Tim went to a castle (2 August 2023).", store="tim")
    system.add("D19:4", "[21 November 2023] John: You enjoy fantasy books like Harry Potter and Game of "
               "Thrones, right?", johns_unit, store="john")
    system.ask("Which two fantasy novels does Tim particularly enjoy writing about?",
               "Harry Potter and Game of Thrones", ["D4:7"], [], stores={"tim": ["D4:9"], "john": ["D19:4"]},
               prediction="Tim went to a castle")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


def test_gold_words_a_question_asks_do_not_ground_its_extractions_drop(tracer_provider, span_exporter):
    """An inferred gold ("Likely no; since this one went badly") shares a common word with a sentence of one
    evidence message that asks ("What's been up since we last talked?"). A question states no fact: that
    word is the asker's, not the answer said, so the verdict on that message's extraction (it kept nothing
    of "since") is no better grounded than the other message's, whose unit the search passed over."""
    system = _Mem0(tracer_provider)
    system.add("D18:1", "[20 October 2023] Melanie: Hey Caroline, that roadtrip this past weekend was "
               "insane! What's been up since we last talked?",
               "Melanie went on a road trip with her family (20 October 2023).")
    system.add("D18:3", "[20 October 2023] Melanie: Yeah, our trip got off to a bad start. I was really "
               "scared when we got into the accident.",
               "Melanie's road trip got off to a bad start with an accident that scared her "
               "(20 October 2023).")
    system.add("D18:9", "[20 October 2023] Melanie: I finished a new painting of the lake.",
               "Melanie finished a new painting of the lake (20 October 2023).")
    system.ask("Would Melanie go on another roadtrip soon?", "Likely no; since this one went badly",
               ["D18:1", "D18:3"], ["D18:9", "D18:1"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


@pytest.mark.parametrize(("said_on", "blamed", "error_type"), [
    ("11 January 2024", "search", ErrorType.RETRIEVAL),
    ("3 March 2023", "extract D25:8", ErrorType.EXTRACTION),
])
def test_a_unit_of_the_same_day_stating_the_gold_holds_what_an_extraction_about_other_things_left(
        tracer_provider, span_exporter, said_on, blamed, error_type):
    """The evidence is a photo of a kayak; its extraction wrote about the rest of the message. A unit from
    the same speaker's turn of that day says the whole gold ("enjoys kayaking"), though none of the
    question's words: the day's turns talk about one thing, so memory held the answer and the search that
    passed over it is to blame. The same words said on another day are another occasion's: nothing ties
    them to the photo, and the extraction stays at fault."""
    system = _Mem0(tracer_provider)
    system.add("D25:8", "[11 January 2024] Evan: Nature really has a way of calming the soul. Last summer I "
               "took this pic on a camping trip. [shares a photo of a kayak seen from the front of the boat]",
               "Nature has a way of calming the soul (11 January 2024).")
    system.add("D25:9", "[11 January 2024] Evan: My new car is blue.",
               "Evan's new car is blue (11 January 2024).")
    system.add("D25:10", f"[{said_on}] Evan: I love kayaking on the lake, it is so peaceful.",
               f"Evan enjoys kayaking on the water and finds it peaceful ({said_on}).")
    system.ask("What did Evan share a photo of that was taken on a camping trip?", "a kayak", ["D25:8"],
               ["D25:9"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


@pytest.mark.parametrize(("said", "blamed", "error_type"), [
    ("You'll see, our two teams will fight for the championship, and mine will win!", "extract D13:15",
     ErrorType.EXTRACTION),
    ("You'll see, mine will come out on top!", "search", ErrorType.RETRIEVAL),
])
def test_units_about_other_parts_of_a_message_keeping_none_of_the_gold_it_said_hid_nothing_from_the_search(
        tracer_provider, span_exporter, said, blamed, error_type):
    """The extraction wrote only about another part of the message ("a Manchester City fan"), and no
    sentence of the message states half the gold, so an evidence id naming the turn beside the answer, or
    an answer inferred from the fact, is not ruled out. When the message said gold words ("teams",
    "championship") and the unit keeps none of them, a search that had returned it would have handed the
    reader the message's other parts and not the answer: the extraction lost it first. When the message
    said none (an inferred answer), the unit is what memory had of the fact, and the search that passed
    over it is to blame."""
    system = _Mem0(tracer_provider)
    system.add("D13:14", "[13 June 2022] James: Liverpool will take the league this year, mark my words.",
               "James is a Liverpool fan who expects them to take the league (13 June 2022).")
    system.add("D13:15", f"[13 June 2022] John: As a Manchester City fan, I can't agree with you. {said}",
               "John is a Manchester City fan (13 June 2022).")
    system.add("D13:16", "[13 June 2022] James: I baked bread with my sister yesterday.",
               "James baked bread with his sister (12 June 2022).")
    system.ask("What disagreement do James and John have about their football teams?",
               "debating on which team will perform better in the championship", ["D13:15"], ["D13:16"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


@pytest.mark.parametrize(("fact", "blamed", "error_type"), [
    ("Joanna creates visuals of her characters to help bring them alive (25 October 2022).", "extract D25:8",
     ErrorType.EXTRACTION),
    ("Joanna creates visuals of her characters to help bring them alive in her head so she can write better "
     "(25 October 2022).", "search", ErrorType.RETRIEVAL),
])
def test_a_returned_unit_the_failed_answer_gives_back_without_gold_its_message_said_was_a_lossy_extraction(
        tracer_provider, span_exporter, fact, blamed, error_type):
    """The search returned the unit written from the evidence, and the failed answer repeats it. When the
    unit lacks gold words its message said ("in her head so she can write better"), the reader gave back all
    memory had, and the extraction that left the rest out is to blame. A unit holding every gold word its
    message said lost nothing of it: the extraction is not blamed, and the read side's verdict stands."""
    system = _Mem0(tracer_provider)
    system.add("D25:8", "[25 October 2022] Joanna: Thanks, Nate! They're visuals of the characters to help "
               "bring them alive in my head so I can write better.", fact)
    system.add("D25:9", "[25 October 2022] Nate: I adopted a third turtle.",
               "Nate adopted a third turtle (25 October 2022).")
    system.ask("What inspires Joanna to create drawings of her characters?",
               "visuals to help bring the characters alive in her head so she can write better", ["D25:8"],
               ["D25:8", "D25:9"],
               prediction="Joanna creates visuals of her characters to help bring them alive (25")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


@pytest.mark.parametrize(("shown", "blamed", "error_type"), [
    ("Jolene aims to work on projects on renewable energy and on providing clean water to those with "
     "limited access (26 August 2023).", "search", ErrorType.RETRIEVAL),
    ("Jolene is studying engineering and loves video games (26 August 2023).", "extract D22:12",
     ErrorType.EXTRACTION),
])
def test_an_extraction_that_wrote_nothing_after_reading_a_memory_stating_the_fact_deduplicated(
        tracer_provider, span_exporter, shown, blamed, error_type):
    """mem0 2.x shows its extractor the memories similar to the message and writes only new facts. An
    extraction that wrote nothing after reading a memory that states the fact found it held: it dropped
    nothing, and the search that passed over that memory is to blame. One that read only memories on
    other things dropped the fact."""
    system = _Mem0(tracer_provider)
    system.add("D22:10", "[26 August 2023] Jolene: I'm keen on two projects.", shown)
    system.add("D22:11", "[26 August 2023] Deborah: I went surfing at the beach.",
               "Deborah went surfing at the beach (26 August 2023).")
    system.add("D22:12", "[26 August 2023] Jolene: The other is finding ways to supply clean water to those "
               "with limited access.", None, shown=("D22:10",))
    system.ask("What projects is Jolene planning?", "finding ways to supply clean water to those with "
               "limited access", ["D22:12"], ["D22:11"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


def test_a_memory_the_extraction_read_stating_the_whole_gold_held_the_fact(tracer_provider, span_exporter):
    """The message names the dog only as 'that name'; the memory the extraction read says the whole answer
    (the stuffed dog Tilly) in other words than the message: it held the fact, and the extraction that
    wrote nothing new deduplicated."""
    system = _Mem0(tracer_provider)
    system.add("D24:2", "[21 October 2022] Joanna: Nate gave me a stuffed animal dog and I named it Tilly.",
               "Joanna has a stuffed animal dog named Tilly that was a gift from Nate (21 October 2022).")
    system.add("D24:3", "[21 October 2022] Nate: I adopted a third turtle.",
               "Nate adopted a third turtle (21 October 2022).")
    system.add("D24:6", "[21 October 2022] Joanna: I used to have a dog back in Michigan with that name. The "
               "name helps me remember her.", None, shown=("D24:2",))
    system.ask("What does Joanna use to remember her dog from Michigan?", "a stuffed animal dog named Tilly",
               ["D24:6"], ["D24:3"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


# -- MemBase's systems: raw messages folded into memory, containers of messages,
# -- a search's working state, copies of returned memories --------------------------------------------


class Tracked:
    """A MemoryTracer whose operations are remembered by label, for the tests below."""

    def __init__(self, provider: TracerProvider) -> None:
        self.mt = MemoryTracer(provider, capture_content=True)
        self.ops: dict[str, str] = {}

    def op(self, label: str, name: str, category: str):  # type: ignore[no-untyped-def]
        return _Remembered(self, label, self.mt.operation(name, category))

    def answer(self, context: Variable, *, question: str, gold: str, evidence: str,
               prediction: str = "I don't know.") -> None:
        with self.op("answer", "question-answering", Category.EVALUATION) as op:
            op.read("query:q1", content=question, kind=VariableKind.QUERY)
            op.read(context)
            answer = op.write("prediction:q1", prediction, kind=VariableKind.ANSWER)
        with self.mt.operation("llm-judge", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, question=question, prediction=prediction, gold=gold,
                                 evidence=[evidence], answer=answer, case_id="q1")


class _Remembered:
    def __init__(self, tracked: Tracked, label: str, manager: object) -> None:
        self.tracked, self.label, self.manager = tracked, label, manager

    def __enter__(self):  # type: ignore[no-untyped-def]
        op = self.manager.__enter__()  # type: ignore[attr-defined]
        context = op.span_context
        self.tracked.ops[self.label] = f"op:{context.trace_id:032x}:{context.span_id:016x}"
        return op

    def __exit__(self, *exc: object) -> None:
        self.manager.__exit__(*exc)  # type: ignore[attr-defined]


def test_a_window_that_folded_the_message_in_lossily_failed_to_extract_it(tracer_provider, span_exporter):
    """Long-Context: each message is merged into one window by an ``update`` operation. The merge that
    read the message itself and kept only a few of its words never put the fact into memory: an
    ExtractionError, though it wrote a new version of the window about the same fact."""
    t = Tracked(tracer_provider)
    with t.op("first", "memory_system.memory_update", Category.UPDATE) as op:
        op.read("msg:D1:1", content="Melanie: I painted a lake sunrise last year.", kind=VariableKind.MESSAGE)
        window = op.write("memory-unit", "Melanie: I painted a lake sunrise last year.",
                          kind=VariableKind.MEMORY_UNIT)
    with t.op("fold", "memory_system.memory_update", Category.UPDATE) as op:
        op.read(f"msg:{FACT_ID}", content=MESSAGE, kind=VariableKind.MESSAGE)
        window = op.update(window, "Melanie: I painted a lake sunrise last year.\n"
                                   "Caroline: I have been playing for ten years now.")
    with t.op("retrieve", "memory_system.retrieve", Category.RETRIEVAL) as op:
        op.read("query:q1", content=QUESTION, kind=VariableKind.QUERY)
        op.read(window)
        context = op.write("context:q1", str(window.content), kind=VariableKind.CONTEXT)
    t.answer(context, question=QUESTION, gold="violin", evidence=FACT_ID)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (t.ops["fold"], ErrorType.EXTRACTION)


PARTNER = ("Caroline: Yeah, totally! It's great we both face the same challenges, it motivates us and it's "
           "like having a partner to dance with!")
PARTNER_OTHERS = ("Caroline: I keep facing new challenges at work every single day.",
                  "Caroline: My partner and I love to dance on weekends.",
                  "Caroline: It motivates us to keep going, and it's great fun.")


def test_a_window_cut_to_a_messages_first_word_holds_no_abstractive_fact_across_other_messages_lines(
        tracer_provider, span_exporter):
    """Long-Context folds each message into one window; the fold of the evidence kept only its first words
    ("Yeah totally It's ..."). The gold is abstractive (none of its words in the message), so the fact is
    the whole message. Across the window's other lines -- other messages, quoted word for word -- most of
    the message's words are there, but none of those lines is this message's saying; and a cut of one
    word restates nothing of it. The fold failed to put the message into memory: an ExtractionError, not
    the reader's (the window's words) nor the later fold's (the cut line's one word)."""
    t = Tracked(tracer_provider)
    lines: list[str] = []
    window = None
    for n, said in enumerate(PARTNER_OTHERS, 1):
        with t.op(f"fold D1:{n}", "memory_system.memory_update", Category.UPDATE) as op:
            op.read(f"msg:D1:{n}", content=said, kind=VariableKind.MESSAGE)
            lines.append(said)
            window = (op.update(window, "\n".join(lines)) if window is not None
                      else op.write("memory-unit", "\n".join(lines), kind=VariableKind.MEMORY_UNIT))
    assert window is not None
    with t.op("fold", "memory_system.memory_update", Category.UPDATE) as op:
        op.read("msg:D1:9", content=PARTNER, kind=VariableKind.MESSAGE)
        lines.append("Caroline: Yeah totally It's ...")
        window = op.update(window, "\n".join(lines))
    with t.op("fold later", "memory_system.memory_update", Category.UPDATE) as op:
        op.read("msg:D1:10", content="Melanie: Glad to hear that, see you soon!", kind=VariableKind.MESSAGE)
        lines.append("Melanie: Glad to hear that, see you soon!")
        window = op.update(window, "\n".join(lines))
    question = "How does Caroline see her friendship with Melanie?"
    with t.op("retrieve", "memory_system.retrieve", Category.RETRIEVAL) as op:
        op.read("query:q1", content=question, kind=VariableKind.QUERY)
        op.read(window)
        context = op.write("context:q1", str(window.content), kind=VariableKind.CONTEXT)
    t.answer(context, question=question,
             gold="as mutual encouragement between friends", evidence="D1:9")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (t.ops["fold"], ErrorType.EXTRACTION)


def test_a_memcell_that_left_the_message_out_lost_it_whatever_its_summary_quotes(
        tracer_provider, span_exporter):
    """EverMemOS's boundary detector cuts a memcell from the buffer: the messages it keeps, and a topic
    summary. A memcell without the message's record has not kept the message, though its summary quotes
    the message's opening: the detector lost it, not the step that made the memcell a memory unit."""
    t = Tracked(tracer_provider)
    hello = {"content": "Melanie: hi there, how are you?", "timestamp": "2023-05-08T13:56:00"}
    fact = {"content": MESSAGE, "timestamp": "2023-05-08T13:56:00"}
    with t.op("buffer", "memory_system.message_buffer_update", Category.UPDATE) as op:
        op.read(f"msg:{FACT_ID}", content=json.dumps(fact), kind=VariableKind.MESSAGE)
        op.read("msg:D1:2", content=json.dumps(hello), kind=VariableKind.MESSAGE)
        buffer = op.write("message-buffer", json.dumps([fact, hello]), kind=VariableKind.OTHER)
    with t.op("cut", "evermemos.boundary_detection", Category.EXTRACTION) as op:
        op.read(buffer)
        cell = op.write("memcell", json.dumps({"original_data": [hello], "timestamp": "2023-05-08T13:56:00",
                                               "summary": MESSAGE[:45]}), kind=VariableKind.OTHER)
    with t.op("finalize", "memory_system.finalize_memory_unit", Category.INGEST) as op:
        op.read(cell)
        unit = op.write("memory-unit-1", json.dumps({"original_data": [hello], "summary": None}),
                        kind=VariableKind.MEMORY_UNIT)
    with t.op("retrieve", "memory_system.hybrid_retrieval", Category.RETRIEVAL) as op:
        op.read("query:q1", content=QUESTION, kind=VariableKind.QUERY)
        op.read(unit)
        context = op.write("context:q1", str(unit.content), kind=VariableKind.CONTEXT)
    t.answer(context, question=QUESTION, gold="violin", evidence=FACT_ID)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (t.ops["cut"], ErrorType.EXTRACTION)


def test_a_search_is_judged_by_what_it_returned_not_by_the_candidates_it_checked(
        tracer_provider, span_exporter):
    """An agentic search step reads the candidate list, writes it again for its own sufficiency check
    (and reads it back), and returns records: the list holds the fact, what it returned does not.
    It lost the fact (RetrievalError), not the answerer."""
    system = ingested(tracer_provider)
    ids = ", ".join(f"{rid}-{20 - i}.0" for i, rid in enumerate(system.units))
    with system.mt.operation("memory_system.hybrid_retrieval", Category.RETRIEVAL) as op:
        op.read("query:q1", content=QUESTION, kind=VariableKind.QUERY)
        for unit in system.units.values():
            op.read(unit)
        results = op.write("hybrid_retrieval_results:q1", ids, kind=VariableKind.OTHER)
    with system.mt.operation("memory_system.agentic_round1_bundle", Category.RETRIEVAL) as op:
        system.remember("bundle", op)
        op.read(results)
        # Linked by value, the check list it reads is the copy an earlier search wrote (``name~k``).
        op.read("reranked_for_check", content=ids, kind=VariableKind.OTHER)
        op.write("reranked_for_check~2", ids, kind=VariableKind.OTHER)
        context = op.write("context:q1", str(system.units["1b2c3d4e5f60718293a4b5c6"].content),
                           kind=VariableKind.CONTEXT)
    system.answer("q1", context, "guitar")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["bundle"], ErrorType.RETRIEVAL)


PAIR_MESSAGE = "Caroline: I have been playing the violin, the cello and the piano for ten years now."
CHURCH = "2c3d4e5f60718293a4b5c6d7"


@pytest.mark.parametrize(("other", "blamed"), [
    # Another message's memory holding part of the gold: the words, not the fact the question asks.
    (("Caroline: I have been playing the violin and the cello at church for ten years.",
      "Caroline has played the violin and the cello at church for ten years."), "rerank q1"),
    # Another message's memory stating the whole gold: the reader had the answer either way.
    (("Caroline: I play the violin, the cello and the piano at church.",
      "Caroline plays the violin, the cello and the piano at church."), "answer q1"),
])
def test_a_search_step_that_dropped_the_evidences_memory_and_passed_on_only_another_saying_lost_it(
        tracer_provider, span_exporter, other, blamed):
    """The final rerank read the candidate list holding the evidence's memory and returned only another
    message's memory, which the word test sees carrying the fact (part of a two-part gold). A memory from
    elsewhere sharing the gold's words may tell another event, and the answer failed on it: the search step
    that dropped the evidence's own saying lost the fact (RetrievalError), not the reader. When the memory
    it passed on states the whole gold, the reader had the answer (ResponseError)."""
    system = EverMemOS(tracer_provider)
    system.ingest(FACT_ID, PAIR_MESSAGE,
                  "Caroline has played the violin, the cello and the piano for ten years.")
    system.ingest("1b2c3d4e5f60718293a4b5c6", *UNITS["1b2c3d4e5f60718293a4b5c6"])
    system.ingest(CHURCH, *other)
    context = system.search("q1", [CHURCH])
    system.answer("q1", context, "guitar", gold="violin, cello and piano")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (
        system.ops[blamed], ErrorType.RETRIEVAL if blamed.startswith("rerank") else ErrorType.RESPONSE)


RAINBOW = "Caroline: I was out walking in my neighborhood when I came across this cool rainbow sidewalk."
RAINBOW_Q = "What did Caroline find in her neighborhood during her walk?"


def test_a_searchs_copy_of_a_memory_carries_what_the_memory_carries(tracer_provider, span_exporter):
    """A graph linking values by identity gives a search its own copy of each memory it returns
    (``name~k``). The memory states the fact in other words (it carries it as written from the
    message); the copy, which the answerer read, carries it too: a ResponseError, not the search's."""
    t = Tracked(tracer_provider)
    memory = "Caroline came across a rainbow sidewalk, which reminded her of love and acceptance."
    with t.op("extract", "memory_system.extract_facts", Category.EXTRACTION) as op:
        op.read("msg:D14:23", content=RAINBOW, kind=VariableKind.MESSAGE)
        op.write("memory-unit-7", memory, kind=VariableKind.MEMORY_UNIT)
    with t.op("search", "memory_system.search_vector_store", Category.RETRIEVAL) as op:
        op.read("query:q1", content=RAINBOW_Q, kind=VariableKind.QUERY)
        copy = op.write("memory-unit-7~2", memory, kind=VariableKind.MEMORY_UNIT)
    t.answer(copy, question=RAINBOW_Q, gold="a rainbow sidewalk", evidence="D14:23", prediction="a dog")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (t.ops["answer"], ErrorType.RESPONSE)


def _window_rewritten_keeping(t: Tracked, later: str) -> None:
    """A long-context window of the evidence's message and a ``later`` line (message D1:4); a rewrite
    that drops the evidence's line and keeps ``later``; the question's retrieval of the window; a wrong
    answer ("guitar" for "violin")."""
    with t.op("append", "memory_system.memory_update", Category.UPDATE) as op:
        op.read(f"msg:{FACT_ID}", content=MESSAGE, kind=VariableKind.MESSAGE)
        op.read("msg:D1:4", content=later, kind=VariableKind.MESSAGE)
        window = op.write("memory-unit", f"{MESSAGE}\n{later}", kind=VariableKind.MEMORY_UNIT)
    with t.op("rewrite", "memory_system.memory_update", Category.UPDATE) as op:
        window = op.update(window, f"Caroline: I have been busy for ten years now.\n{later}")
    with t.op("retrieve", "memory_system.retrieve", Category.RETRIEVAL) as op:
        op.read("query:q1", content=QUESTION, kind=VariableKind.QUERY)
        op.read(window)
        context = op.write("context:q1", str(window.content), kind=VariableKind.CONTEXT)
    t.answer(context, question=QUESTION, gold="violin", evidence=FACT_ID, prediction="guitar")


def test_a_windows_line_quoting_a_reply_is_the_replys_statement_not_the_evidences(
        tracer_provider, span_exporter):
    """A long-context window holds each message as a line. A later rewrite dropped the evidence's line;
    the reply's line, which repeats the fact's words about something else, is the reply's: the window
    no longer held the evidence's information after the rewrite (UpdateError), not a context the
    answerer missed."""
    t = Tracked(tracer_provider)
    reply = "Melanie: Ten years, Caroline? My violin has sat in a closet for years, I never play it now."
    _window_rewritten_keeping(t, reply)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (t.ops["rewrite"], ErrorType.UPDATE)


def test_a_windows_line_of_the_same_speaker_saying_it_again_still_carries_it(tracer_provider, span_exporter):
    """The same window, but the later line is the evidence's own speaker coming back to the fact: that is
    the speaker saying it again, and the window still held it when the answerer missed it."""
    t = Tracked(tracer_provider)
    again = "Caroline: Violin lessons for the kids start Monday, and I will play at the recital."
    _window_rewritten_keeping(t, again)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (t.ops["answer"], ErrorType.RESPONSE)


def test_a_windows_line_of_another_message_saying_the_date_is_not_the_evidences_statement(
        tracer_provider, span_exporter):
    """A long-context window descends from every message merged into it. The merge that read the evidence
    kept none of it; another message of the same session says "last week" of another event, and its line
    states the gold's date in the window the answerer read. That line is the other message's: the window
    never held when Caroline met her friends, and the merge that dropped it is the fault, not the reader."""
    t = Tracked(tracer_provider)
    question = "When did Caroline meet up with her friends, family, and mentors?"
    school = "[9 June 2023] Caroline: I wanted to tell you about my school event last week."
    rocks = ("[9 June 2023] Caroline: My friends, family and mentors are my rocks. Here's a pic from when "
             "we met up last week!")
    with t.op("first", "memory_system.memory_update", Category.UPDATE) as op:
        op.read("msg:D3:1", content=school, kind=VariableKind.MESSAGE)
        window = op.write("memory-unit", school, kind=VariableKind.MEMORY_UNIT)
    with t.op("fold", "memory_system.memory_update", Category.UPDATE) as op:
        op.read("msg:D3:11", content=rocks, kind=VariableKind.MESSAGE)
        window = op.update(window, f"{school}\n[9 June 2023] Caroline: Thanks, Mel!")
    with t.op("retrieve", "memory_system.retrieve", Category.RETRIEVAL) as op:
        op.read("query:q1", content=question, kind=VariableKind.QUERY)
        op.read(window)
        context = op.write("context:q1", str(window.content), kind=VariableKind.CONTEXT)
    t.answer(context, question=question, gold="The week before 9 June 2023", evidence="D3:11")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (t.ops["fold"], ErrorType.EXTRACTION)


def test_a_transcript_lines_speaker_prefix_is_its_header_not_the_fact(tracer_provider, span_exporter):
    """MemBase's buffers write each message as 'Speaker John (role: user) says: ...'. That prefix names who
    speaks, as 'John: ' does: read as part of the first sentence, it made that sentence the one holding
    the gold's 'John' (of "likely John's friend"), and another line of John about Harry Potter carried it.
    The fact is the sentence about Anthony, which the merge dropped."""
    assert split_header("[2 August 2023] Speaker John (role: user) says: Hi Tim!") == (
        "[2 August 2023] Speaker John (role: user) says: ", "Hi Tim!")
    t = Tracked(tracer_provider)

    def line(text: str) -> str:
        return f"Speaker John (role: user) says: {text}\nTimestamp: 2023-08-02T16:17:00"

    earlier = line("I remember the Harry Potter books, you told me about them!")
    said = line("Oh yeah, I remember you telling me about Harry Potter! Anthony and I went to this charity "
                "thing and ended up in an intense trivia contest.")
    with t.op("first", "memory_system.memory_update", Category.UPDATE) as op:
        op.read("msg:D4:7", content=earlier, kind=VariableKind.MESSAGE)
        window = op.write("memory-unit", earlier, kind=VariableKind.MEMORY_UNIT)
    with t.op("fold", "memory_system.memory_update", Category.UPDATE) as op:
        op.read("msg:D4:8", content=said, kind=VariableKind.MESSAGE)
        window = op.update(window, f"{earlier}\n{line('Oh yeah!')}")
    with t.op("retrieve", "memory_system.retrieve", Category.RETRIEVAL) as op:
        op.read("query:q1", content="Who is Anthony?", kind=VariableKind.QUERY)
        op.read(window)
        context = op.write("context:q1", str(window.content), kind=VariableKind.CONTEXT)
    t.answer(context, question="Who is Anthony?", gold="likely John's friend, colleague or family",
             evidence="D4:8")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (t.ops["fold"], ErrorType.EXTRACTION)


# -- EverMemOS's episodes: dated in their own words, written into the memcell they were read from -------


def _said(text: str, when: str) -> str:
    """A message as MemBase records it: its text and its time."""
    return json.dumps({"content": text, "name": "Caroline", "role": "user", "timestamp": when})


EPISODE_IDS = ("a1b2c3d4e5f6a7b8c9d0e1f2", "b7c8d9e0f1a2b3c4d5e6f7a8", "c9d8e7f6a5b4c3d2e1f0a9b8")


def _episodes(provider: TracerProvider, said: str, when: str, episode: str, question: str, gold: str, *,
              returned: bool, prediction: str = "I don't know.",
              recorded: Callable[[str, str], str] = _said, by_id: bool = True) -> dict[str, str]:
    """Three memcells ingested raw and rewritten by their extraction into an episode; the evidence's is
    ``episode`` (the others are about other things); a search in steps (candidates, listed by id or, not
    ``by_id``, by their episodes' texts, then a rerank whose context holds the evidence's unit when
    ``returned``), a wrong answer and its judge."""
    system = EverMemOS(provider)
    mt = system.mt
    cells = [(EPISODE_IDS[0], said, episode),
             (EPISODE_IDS[1], "My dog Max loves long walks in the park.",
              "Caroline's dog Max loves long walks."),
             (EPISODE_IDS[2], "I painted a lake sunrise last year.", "Melanie painted a lake sunrise.")]
    units: dict[str, Variable] = {}
    episodes = {rid: written for rid, _, written in cells}
    for rid, text, written in cells:
        raw = json.dumps({"event_id": rid, "timestamp": when,
                          "original_data": [{"content": text, "timestamp": when}]})
        with mt.operation("memory_system.finalize_memory_unit", Category.INGEST) as op:
            op.read(f"msg:{rid}", content=recorded(text, when), kind=VariableKind.MESSAGE)
            unit = op.write(f"memory-unit-{rid}", raw, kind=VariableKind.MEMORY_UNIT)
        with mt.operation("memory_system.extract_memory", Category.EXTRACTION) as op:
            system.remember(f"extract {rid}", op)
            units[rid] = op.update(unit, json.dumps({"event_id": rid, "timestamp": when, "episode": written}))
    with mt.operation("memory_system.hybrid_retrieval", Category.RETRIEVAL) as op:
        system.remember("hybrid", op)
        op.read("query:q1", content=question, kind=VariableKind.QUERY)
        for unit in units.values():
            op.read(unit)
        ranked = (", ".join(f"{r}-{3 - n}.0" for n, r in enumerate(units)) if by_id
                  else "\n".join(episodes[r] for r in units))
        results = op.write("hybrid_retrieval_results:q1", ranked, kind=VariableKind.OTHER)
    with mt.operation("memory_system.agentic_final_rerank", Category.RETRIEVAL) as op:
        system.remember("rerank", op)
        op.read(results)
        kept = EPISODE_IDS[:2] if returned else EPISODE_IDS[1:]
        context = op.write("context:q1", "\n".join(episodes[r] for r in kept), kind=VariableKind.CONTEXT)
    with mt.operation("question-answering", Category.EVALUATION) as op:
        system.remember("answer", op)
        op.read("query:q1", content=question, kind=VariableKind.QUERY)
        op.read(context)
        answer = op.write("prediction:q1", prediction, kind=VariableKind.ANSWER)
    with mt.operation("llm-judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question=question, prediction=prediction, gold=gold,
                             evidence=[EPISODE_IDS[0]], answer=answer, case_id="q1")
    return system.ops


GROUP = "When did Caroline go to the LGBTQ support group?"
GROUP_SAID = "I went to a LGBTQ support group yesterday and it was so powerful."
GROUP_FACT = "Caroline attended an LGBTQ support group recently and found the transgender stories inspiring."


def test_an_episode_dated_in_its_words_on_the_messages_day_keeps_a_relative_date(
        tracer_provider, span_exporter):
    """"Yesterday", said on 8 May, is the gold 7 May 2023. The episode the extraction wrote opens with
    its day, 8 May 2023, and tells the visit: it holds what dates it (:mod:`.anchored`). The search
    that left it out is to blame, not the extraction."""
    ops = _episodes(tracer_provider, GROUP_SAID, "2023-05-08T13:56:00",
                    f"On 2023-05-08, Caroline and Melanie had a conversation. {GROUP_FACT}", GROUP,
                    "7 May 2023", returned=False)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["rerank"], ErrorType.RETRIEVAL)


def test_a_day_read_from_a_chat_header_with_a_time_of_day_anchors_a_relative_date(
        tracer_provider, span_exporter):
    """mem0 apps send each turn as ``[1:56 pm on 8 May, 2023] Caroline: ...``: the day is read from the
    header with its time of day left out (:func:`.anchored.header_day`), so the dated episode keeps
    "yesterday" as it does when the day comes from a record's timestamp."""
    ops = _episodes(tracer_provider, GROUP_SAID, "2023-05-08T13:56:00",
                    f"On 2023-05-08, Caroline and Melanie had a conversation. {GROUP_FACT}", GROUP,
                    "7 May 2023", returned=False,
                    recorded=lambda text, when: f"[1:56 pm on 8 May, 2023] Caroline: {text}")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["rerank"], ErrorType.RETRIEVAL)


def test_a_search_step_that_handed_the_evidences_episode_on_in_its_candidates_did_not_drop_it(
        tracer_provider, span_exporter):
    """The candidate list holds the evidence's episode in its own words (not its id); the rerank after it
    left the episode out. The step whose own output held the episode passed it on: the rerank that
    dropped it is to blame, not the step listing candidates."""
    ops = _episodes(tracer_provider, GROUP_SAID, "2023-05-08T13:56:00",
                    f"On 2023-05-08, Caroline and Melanie had a conversation. {GROUP_FACT}", GROUP,
                    "7 May 2023", returned=False, by_id=False)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["rerank"], ErrorType.RETRIEVAL)


def test_a_fact_dated_only_by_its_records_timestamp_has_lost_a_relative_date(tracer_provider, span_exporter):
    """The same fact without the episode's dated opening: only the record's timestamp says when it was
    written, and the fact says "recently": the extraction lost the day."""
    ops = _episodes(tracer_provider, GROUP_SAID, "2023-05-08T13:56:00", GROUP_FACT, GROUP, "7 May 2023",
                    returned=False)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops[f"extract {EPISODE_IDS[0]}"], ErrorType.EXTRACTION)


def test_an_event_the_episode_dates_itself_on_the_messages_day_was_misdated(tracer_provider, span_exporter):
    """The episode says the visit was on 8 May, the day the message said "yesterday": the statement dates
    the event itself, wrongly, whatever the episode's opening says."""
    ops = _episodes(tracer_provider, GROUP_SAID, "2023-05-08T13:56:00",
                    "On 2023-05-08, Caroline and Melanie had a conversation. Caroline attended an LGBTQ "
                    "support group on 8 May 2023.", GROUP, "7 May 2023", returned=False)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops[f"extract {EPISODE_IDS[0]}"], ErrorType.EXTRACTION)


def test_an_episode_that_tells_another_event_on_the_day_does_not_keep_the_date(
        tracer_provider, span_exporter):
    ops = _episodes(tracer_provider, GROUP_SAID, "2023-05-08T13:56:00",
                    "On 2023-05-08, Caroline and Melanie had a conversation. Caroline talked about her week.",
                    GROUP, "7 May 2023", returned=False)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops[f"extract {EPISODE_IDS[0]}"], ErrorType.EXTRACTION)


def test_what_an_extraction_wrote_into_the_raw_memcell_is_followed_like_an_extractors_facts(
        tracer_provider, span_exporter):
    """The memcell held the council message raw; the extraction rewrote it into an episode that tells
    the meeting in its own words (the abstractive gold is in none of them). The episode was stored and
    the search's rerank left it out: RetrievalError at the step that returned the context, not the
    extraction (which dropped only its input's raw record) nor the step listing candidates."""
    ops = _episodes(tracer_provider, COUNCIL_SAID.split(": ", 1)[1], "2023-07-15T13:51:00",
                    "On 2023-07-15, Caroline and Melanie had a conversation. " + COUNCIL_FACT, COUNCIL,
                    COUNCIL_GOLD, returned=False)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["rerank"], ErrorType.RETRIEVAL)


LEAGUE = "How did John get introduced to basketball?"
LEAGUE_SAID = ("Basketball has been a part of my life ever since I was a kid. When I turned ten, dad "
               "signed me up for a local league, and I've been playing ever since.")
LEAGUE_GOLD = "Dad signed him up for a local league"


def test_a_reader_that_had_the_extracted_statement_with_part_of_the_gold_is_the_response_error(
        tracer_provider, span_exporter):
    """The episode tells the message's fact in other words, with part of the gold (his dad, a local
    league); the reader had it and did not answer: ResponseError."""
    ops = _episodes(tracer_provider, LEAGUE_SAID, "2023-08-11T13:08:00",
                    "Basketball has been a part of John's life since childhood, starting with watching NBA "
                    "games with his dad and then playing in local leagues.", LEAGUE, LEAGUE_GOLD,
                    returned=True)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["answer"], ErrorType.RESPONSE)


def test_a_reader_that_had_only_a_topic_of_the_fact_leaves_the_extraction_to_blame(
        tracer_provider, span_exporter):
    ops = _episodes(tracer_provider, LEAGUE_SAID, "2023-08-11T13:08:00",
                    "John also mentioned something about basketball and his life.", LEAGUE, LEAGUE_GOLD,
                    returned=True)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops[f"extract {EPISODE_IDS[0]}"], ErrorType.EXTRACTION)


# -- mem0's record time, and a gold's capital ---------------------------------------------------------


def test_an_undated_fact_stored_with_its_messages_time_is_on_the_evidences_lineage(
        tracer_provider, span_exporter):
    """The extractor kept "one year ago" in an undated fact; the decision stored it in a record dated by
    the message's time, which says 2022. The extraction passed the information on: the search that
    returned another memory missed it."""
    system = _Mem0(tracer_provider)
    when = "2023-10-08T15:09:00"
    weights = "Evan started lifting weights one year ago."
    with system.mt.operation("mem0.add.extract", Category.EXTRACTION, store_id="s") as op:
        system.remember("extract", op)
        said = {"content": "I started lifting weights one year ago, what a journey.", "timestamp": when}
        message = op.read("msg:D12:2", content=json.dumps(said), kind=VariableKind.MESSAGE)
        facts = op.write("facts:D12:2", weights, kind=VariableKind.FACTS)
        op.step("extract", [message], [facts])
    with system.mt.operation("mem0.create", Category.UPDATE, gen_ai_operation="create_memory",
                             store_id="s") as op:
        op.read(facts)
        system.units["D12:2"] = op.write("mem0:D12:2", json.dumps({"memory": weights, "timestamp": when}),
                                         kind=VariableKind.MEMORY_UNIT)
    system.add("D12:3", "[8 October 2023] Evan: My knee is better now.",
               "Evan's knee is better (8 October 2023).")
    system.ask("When did Evan start lifting weights?", "2022", ["D12:2"], ["D12:3"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


def test_a_golds_capitalised_first_word_is_no_name_the_statement_must_keep(tracer_provider, span_exporter):
    """"Raise money for a dog shelter": the capital is the sentence's, and the message says "raise". The
    stored fact ("sent the collected money to a dog shelter") kept the rest: the search missed it."""
    system = _Mem0(tracer_provider)
    system.add("D10:10", "[8 May 2022] John: Our main goal was to raise money for a dog shelter, which is "
               "not far from the street where I live.",
               "John sent the collected money to a dog shelter near his home.")
    system.add("D10:11", "[8 May 2022] John: I love Hawaiian pizza.", "John loves Hawaiian pizza.")
    system.ask("What was the main goal of the money raised from the charity tournament?",
               "Raise money for a dog shelter", ["D10:10"], ["D10:11"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


KAYAK = "What did Evan share a photo of that was taken on a camping trip?"
KAYAK_SAID = ("[11 January 2024] Evan: Glad to hear it! Nature really has a way of calming and reviving the "
              "soul. Last summer I went on a camping trip. [shares a photo of a kayak seen from the front of "
              "the boat]")
KAYAK_BESIDE = KAYAK_SAID.split(" [shares")[0]
"""The turn without its photo: the evidence id names it, and the photo came in the turn beside it."""


def _kayak_history(provider: TracerProvider, fact: str, *, elsewhere: str | None = None,
                   said: str = KAYAK_SAID) -> _Mem0:
    """Evan's photo turn (``said``) extracted as ``fact``; Sam's turns stored; with ``elsewhere``, a later
    turn of Evan's stored as that fact; the search returns one of Sam's memories."""
    system = _Mem0(provider)
    system.add("D25:8", said, fact)
    for n, thing in enumerate(("pottery", "her garden", "a new book", "the rain")):
        system.add(f"D25:{n}", f"[11 January 2024] Sam: Let me tell you about {thing}.",
                   f"Sam talked about {thing} (11 January 2024).")
    if elsewhere is not None:
        system.add("D26:1", "[20 January 2024] Evan: Still thinking about that trip.", elsewhere)
    system.ask(KAYAK, "a kayak", ["D25:8"], ["D25:0"])
    return system


NATURE_FACT = "Evan believes nature has a way of calming and reviving the soul (11 January 2024)."


def test_a_search_that_missed_what_an_extraction_wrote_about_other_parts_of_the_message_is_to_blame(
        tracer_provider, span_exporter):
    """The evidence id names the turn beside the photo: its message says nothing of a kayak. The extraction
    kept its sentence about nature, in Evan's name, from the turn's own words. Nothing shows it dropped a
    fact (an evidence id beside the turn saying the answer, an answer inferred): what it wrote was in
    memory, and the search that returned none of it is the fault."""
    system = _kayak_history(tracer_provider, NATURE_FACT, said=KAYAK_BESIDE)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)


def test_an_extraction_that_wrote_only_about_other_parts_of_a_message_stating_the_gold_dropped_it(
        tracer_provider, span_exporter):
    """The same extraction of the turn whose photo caption says the gold (a kayak): the message stated the
    answer, and the extraction wrote only about its other parts. What it stored never held the answer, and
    the search returning it would not have given the reader the answer: the extraction dropped it (an
    extractor keeps what a message says, its shared photo included)."""
    system = _kayak_history(tracer_provider, NATURE_FACT)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["extract D25:8"], ErrorType.EXTRACTION)


def test_an_extraction_that_gave_the_turn_to_the_other_speaker_stays_at_fault(tracer_provider, span_exporter):
    """The same statement in Sam's name: the extraction swapped the speaker, its own fault."""
    system = _kayak_history(tracer_provider, "Sam believes nature has a way of calming and reviving the soul "
                                             "(11 January 2024).")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["extract D25:8"], ErrorType.EXTRACTION)


def test_a_unit_of_another_turn_stating_the_whole_gold_makes_the_miss_the_searchs(
        tracer_provider, span_exporter):
    """The turn's extraction kept nothing of it but the speaker (its own statement is no memory of the
    turn), but a later turn's unit says the whole gold and what the question asks by: the answer was in
    memory, and the search missed it."""
    system = _kayak_history(tracer_provider, "Evan turned 40 this year (11 January 2024).",
                            elsewhere="Evan took a photo of a kayak on his camping trip (20 January 2024).")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL)
    # Without that unit, the extraction that stored nothing of the turn is the fault.
    span_exporter.clear()
    system = _kayak_history(tracer_provider, "Evan turned 40 this year (11 January 2024).")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["extract D25:8"], ErrorType.EXTRACTION)


DIET = "What was Evan limiting himself to on his new diet?"
DIET_SAID = ("[6 January 2024] Evan: We're having a family get-together tonight and enjoying some homemade "
             "lasagna. By the way, I've started a new diet, limiting myself to just two ginger snaps a day.")


@pytest.mark.parametrize(("gold", "blamed", "error_type"), [
    ("just two ginger snaps a day", "extract D23:15", ErrorType.EXTRACTION),
    ("ginger", "search sam", ErrorType.RETRIEVAL),
])
def test_a_copy_elsewhere_does_not_excuse_an_extraction_that_dropped_the_whole_gold_its_message_said(
        tracer_provider, span_exporter, gold, blamed, error_type):
    """Evan's message said the whole answer and his extraction wrote only about its other part (the lasagna);
    Sam's reply, stored as Sam's memory, restates it, and Sam's search passed it over. Another message's copy
    excuses the extraction only when the message may not have said the fact (a turn beside the answer, an
    inferred gold): this one said it, in words of several kinds no other message says by chance, and a
    repaired extraction stores it in Evan's memory. A lone plain gold word ("ginger") may be any message's:
    the copy is what memory held, and the search that passed it over is to blame."""
    system = _Mem0(tracer_provider)
    system.add("D23:15", DIET_SAID, "Evan is having a family get-together tonight and enjoying some homemade "
               "lasagna (6 January 2024).", store="evan")
    system.add("D23:16", "[6 January 2024] Sam: That's a great discipline, Evan! We're keeping it light "
               "tonight.", "Sam mentions enjoying homemade lasagna for dinner and admires Evan's discipline "
               "of limiting themselves to two ginger snaps a day (6 January 2024).", store="sam")
    system.add("D23:17", "[6 January 2024] Sam: I repainted my kitchen.", "Sam repainted his kitchen "
               "(6 January 2024).", store="sam")
    system.add("D23:18", "[6 January 2024] Evan: My knee is much better now.",
               "Evan's knee is much better (6 January 2024).", store="evan")
    system.ask(DIET, gold, ["D23:15"], [], stores={"sam": ["D23:17"], "evan": ["D23:18"]})
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


def test_another_turns_unit_holding_a_date_gold_does_not_make_the_miss_the_searchs(
        tracer_provider, span_exporter):
    """A date gold is no statement of the fact: every unit of that time holds it. The turn's extraction
    kept nothing of it; another turn's unit naming the month and a word of the question (the lake) is not what
    memory held of the camping trip, and the extraction stays at fault."""
    system = _Mem0(tracer_provider)
    system.add("D25:8", "[11 January 2024] Evan: In March 2023 I went on a camping trip by the lake.",
               "Evan turned 40 this year (11 January 2024).")
    system.add("D26:1", "[20 January 2024] Evan: My sister moved to a house by a lake in March 2023.",
               "Evan helped his sister move to a house by a lake in March 2023 (20 January 2024).")
    system.add("D26:2", "[20 January 2024] Sam: I passed the adoption agency interviews!",
               "Sam passed the adoption agency interviews (20 January 2024).")
    system.ask("When did Evan go on a camping trip by the lake?", "March 2023", ["D25:8"], ["D26:2"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["extract D25:8"], ErrorType.EXTRACTION)


APOLOGY = "Why did Evan apologize to his partner?"
APOLOGY_SAID = ("[11 January 2024] Evan: I had to apologize to my partner for a drunken night last week. "
                "We went out and I drank way too much at the bar, the night got wild.")


def _apology_history(provider: TracerProvider, fact: str) -> _Mem0:
    """Evan's turn extracted as ``fact`` and stored; the search returns it (and another memory); the
    reader answers wrong."""
    system = _Mem0(provider)
    system.add("D25:2", APOLOGY_SAID, fact)
    system.add("D25:3", "[11 January 2024] Sam: I adopted a cat called Luna.",
               "Sam adopted a cat called Luna (11 January 2024).")
    system.ask(APOLOGY, "for a drunken night", ["D25:2"], ["D25:2", "D25:3"])
    return system


def test_a_reader_that_had_an_extracted_statement_with_part_of_the_answer_is_the_response_error(
        tracer_provider, span_exporter):
    """The extraction told the turn's other sentence in its own words (the night at the bar), not the one
    stating the apology's reason, but it kept part of the answer (a night) and more than the question
    says: the reader had part of the answer with what surrounds it, and answered wrong. (Undated, as mem0
    1.x's extractor writes facts: a date tag would tie it to the apology's sentence by the header's date.)"""
    system = _apology_history(tracer_provider, "Evan drank way too much at a bar and had a wild night out.")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["answer"], ErrorType.RESPONSE)


def test_a_reader_that_had_only_the_questions_own_words_leaves_the_extraction_to_blame(
        tracer_provider, span_exporter):
    """A statement that says only what the question asks (the reason cut off) holds no part of the answer:
    the reader had nothing to answer from, and the extraction lost the fact."""
    system = _apology_history(tracer_provider, "Evan had to apologize to his partner for a "
                                               "(11 January 2024).")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["extract D25:2"], ErrorType.EXTRACTION)


def test_a_plural_gold_the_message_says_in_the_singular_is_found_in_it(tracer_provider, span_exporter):
    """The gold ("Hoodies") is a word the message says in the singular ("This hoodie ..."). Folding the
    bare word as the suffix is stripped finds the gold in the message, so the extraction that kept the
    limited edition line but not the hoodie dropped the answer (the reader had that lossy fact and could
    not answer); without it the gold is not found in the message, the question's sentence alone is what
    a unit must carry, and the reader with the lossy fact is blamed."""
    system = _Mem0(tracer_provider)
    system.add("D16:3", "[21 June 2023] Gina: This hoodie isn't for sale, it's from my own collection. I "
               "made a limited edition line last week to show off my style and creativity - it was tough but "
               "worth it!",
               "Gina made a limited edition line of clothing last week to show off her style and creativity.")
    system.add("D16:4", "[21 June 2023] Jon: My dance studio opens next month.",
               "Jon's dance studio opens next month (21 June 2023).")
    for n, thing in enumerate(("opened her store", "hired a designer", "made a new line", "went to Paris")):
        system.add(f"D17:{n}", f"[{n + 1} July 2023] Gina: I {thing} last week!",
                   f"Gina {thing} (the week before {n + 1} July 2023).")
    system.ask("What did Gina make a limited edition line of?", "Hoodies", ["D16:3"], ["D16:4", "D16:3"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["extract D16:3"], ErrorType.EXTRACTION), \
        verdict.explanation


def _two_books(provider: TracerProvider, gold: str) -> _Mem0:
    """Two evidence messages each hold a part of the answer: one names "Charlotte's Web", the other is a
    photo of a book whose title only the picture shows (its unit says no word of the gold). The search
    returned the first's unit and passed over the second's, alive in the store."""
    system = _Mem0(provider)
    system.add("D6:10", "[6 July 2023] Melanie: I loved reading \"Charlotte's Web\" as a kid.",
               "Melanie loved reading \"Charlotte's Web\" as a kid (6 July 2023).")
    system.add("D7:8", "[12 July 2023] Melanie: This book I read last year reminds me to always pursue my "
               "dreams!", "Melanie read a book last year that reminds her to always pursue her dreams "
               "(12 July 2023).")
    system.add("D7:9", "[12 July 2023] Melanie: My kids loved the beach trip.",
               "Melanie's kids loved the beach trip (12 July 2023).")
    system.ask("What books has Melanie read?", gold, ["D7:8", "D6:10"], ["D7:9", "D6:10"])
    return system


def test_a_reader_whose_context_lacks_part_of_the_gold_yields_to_the_search_that_missed_the_other_part(
        tracer_provider, span_exporter):
    """The context holds the first part of the gold, not the second: the reader had a part, not the
    answer, and the search that passed over the unit of the second evidence message lost the rest,
    though nothing of that unit says the gold's words."""
    system = _two_books(tracer_provider, "\"Nothing is Impossible\", \"Charlotte's Web\"")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["search"], ErrorType.RETRIEVAL), \
        verdict.explanation


def test_a_reader_whose_context_holds_every_gold_word_is_to_blame_whatever_another_message_lost(
        tracer_provider, span_exporter):
    """The same history with the gold the context holds whole: the reader had the answer."""
    system = _two_books(tracer_provider, "Charlotte's Web")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["answer"], ErrorType.RESPONSE), \
        verdict.explanation


DREAM = "What is the recurring dream that Sam keeps having?"


@pytest.mark.parametrize("prediction", ["Sam had a recurring dream where he's flying over skyscrapers",
                                        "I don't know"])
def test_a_search_that_returned_one_messages_part_yields_to_the_loss_of_the_other_messages_part(
        tracer_provider, span_exporter, prediction):
    """Two evidence messages tell the dream: the later one's unit says one of the gold's words ("flying")
    and was returned; the earlier one says it in other words ("soaring over skyscrapers"), and a wrong
    DELETE removed its unit. The reader had one message's part, not the answer (no "cityscape"); the
    deletion of the other part kept the rest from it, whether the failed answer restates the returned
    unit (the search is then not shown to have missed anything) or the reader said nothing."""
    system = _Mem0(tracer_provider)
    system.add("D6:14", "[13 August 2023] Sam: I had this amazing dream last night where I was soaring over "
               "skyscrapers.",
               "Sam had an amazing dream where he was soaring over skyscrapers (13 August 2023).")
    system.add("D9:1", "[2 September 2023] Sam: I went camping with my dog Max.",
               "Sam went camping with his dog Max (2 September 2023).")
    system.delete("D6:14")
    system.add("D24:22", "[10 January 2024] Sam: I had that recurring dream again where I'm flying over "
               "skyscrapers!",
               "Sam had a recurring dream where he's flying over skyscrapers (10 January 2024).")
    system.ask(DREAM, "he's flying over a cityscape.", ["D6:14", "D24:22"], ["D24:22", "D9:1"],
               prediction=prediction)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops["delete D6:14"], ErrorType.DELETION), \
        verdict.explanation


ROADTRIP_SAID = ("[20 October 2023] Melanie: Hey Caroline, that roadtrip this past weekend was insane! We "
                 "were all freaked when my son got into an accident. We were so lucky he was okay. It was a "
                 "real scary experience. Thankfully it's over now. What's been up since we last talked? "
                 "[shares a photo of a car dashboard with a steering wheel, a crumpled cloth on the "
                 "passenger seat, a folded paper map, sunglasses and a coffee cup in the cup holder]")


@pytest.mark.parametrize(("fact", "blamed", "error_type"), [
    ("Melanie's son got into an accident during the road trip (20 October 2023).", "search",
     ErrorType.RETRIEVAL),
    ("Melanie mentioned that it is over now (20 October 2023).", "extract D18:1", ErrorType.EXTRACTION),
])
def test_a_photos_caption_does_not_make_a_fact_of_the_spoken_message_too_small_a_part_of_it(
        tracer_provider, span_exporter, fact, blamed, error_type):
    """An abstractive gold ("3" children, from a son and "their brother"): the message says none of its
    words, and the fact is what the message says. The extraction kept its spoken part (the son's accident)
    in a unit the search passed over; the photo's caption the app appended is a description beside what
    Melanie said, and does not make that fact too small a share of the message to restate it: the search
    is to blame. A fact restating almost nothing of the message (it is over now) left it unstored."""
    system = _Mem0(tracer_provider)
    system.add("D17:2", "[19 October 2023] Melanie: I baked bread with my grandmother's recipe.",
               "Melanie baked bread with her grandmother's recipe (19 October 2023).")
    system.add("D18:1", ROADTRIP_SAID, fact)
    system.ask("How many children does Melanie have?", "3", ["D18:1"], ["D17:2"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


STORE_FACT = ("Gina chose furniture and decor for her store that match her style and make customers feel "
              "comfortable (1 February 2023).")
STORE_STATEMENT = "Gina chose furniture and decor for her store that match her style"


@pytest.mark.parametrize(("prediction", "blamed", "error_type"), [
    ("I don't know", "answer", ErrorType.RESPONSE),
    ("Gina launched an ad campaign for her clothing store", "answer", ErrorType.RESPONSE),
    (STORE_STATEMENT, "extract D3:6", ErrorType.EXTRACTION),
])
def test_a_reader_that_restated_a_statement_with_part_of_the_gold_answered_what_the_extraction_kept(
        tracer_provider, span_exporter, prediction: str, blamed: str, error_type: ErrorType):
    """The extraction kept "comfortable" and dropped "cozy"; the search returned its fact. A reader that
    said nothing of it, or another line's words, had part of the answer and did not give it: ResponseError.
    One that answered with the fact's own words gave what memory said of it, and that fell short of the gold
    because the extraction left the rest out: ExtractionError."""
    system = _Mem0(tracer_provider)
    system.add("D3:6", "[1 February 2023] Gina: I wanted to make the place look like my own style and make "
               "my customers feel cozy. I chose furniture that looks great and is comfy too.", STORE_FACT)
    system.add("D3:7", "[1 February 2023] Gina: I launched an ad campaign for my clothing store.",
               "Gina launched an ad campaign for her clothing store (1 February 2023).")
    system.ask("What did Gina want her customers to feel in her store?", "cozy and comfortable", ["D3:6"],
               ["D3:7", "D3:6"], prediction=prediction)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type), verdict.explanation


TURTLES_SAID = ("[21 October 2022] Nate: Sure do, I love my turtles. Their slow pace and calming nature are "
                "just so soothing to watch.")
TURTLES_FACT = "Nate loves his turtles for their slow pace (21 October 2022)."


@pytest.mark.parametrize(("prediction", "blamed", "error_type"), [
    ("Nate has turtles as pets that always cheer him up", "extract D24:5", ErrorType.EXTRACTION),
    ("Nate went to a game convention", "answer", ErrorType.RESPONSE),
    ("I don't know", "answer", ErrorType.RESPONSE),
])
def test_a_reader_that_answered_with_a_line_matching_the_question_as_well_lost_nothing_itself(
        tracer_provider, span_exporter, prediction: str, blamed: str, error_type: ErrorType):
    """The extraction kept "slow pace" and dropped "calming nature", which the message's sentence said; the
    search returned its fact. A reader that answered with another line holding as much of the question (the
    turtles as pets) looked for the answer and found the statement no better one: the extraction lost what
    it needed (ExtractionError). One that answered with a line holding less of the question, or said it did
    not know, passed over the part of the answer it had (ResponseError)."""
    system = _Mem0(tracer_provider)
    system.add("D24:5", TURTLES_SAID, TURTLES_FACT)
    system.add("D24:7", "[21 October 2022] Nate: My turtles always cheer me up, they're the best pets.",
               "Nate has turtles as pets that always cheer him up (21 October 2022).")
    system.add("D24:9", "[21 October 2022] Nate: I went to a game convention last weekend.",
               "Nate went to a game convention (21 October 2022).")
    system.ask("Why does Nate like turtles as pets?", "Their slow pace and calming nature", ["D24:5"],
               ["D24:7", "D24:9", "D24:5"], prediction=prediction)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type), verdict.explanation


POTTERY_SAID = ("[13 October 2023] Melanie: It was tough, but I'm doing ok. Been reading that book you "
                "recommended a while ago and painting to keep busy.")


@pytest.mark.parametrize(("said", "fact", "blamed", "error_type"), [
    (POTTERY_SAID, "Melanie keeps busy by reading a book (13 October 2023).", "search", ErrorType.RETRIEVAL),
    (POTTERY_SAID, "Melanie continued expressing herself through reading and painting (13 October 2023).",
     "extract D17:10", ErrorType.EXTRACTION),
])
def test_a_search_is_not_blamed_for_passing_over_a_statement_without_what_the_question_asks_about(
        tracer_provider, span_exporter, said: str, fact: str, blamed: str, error_type: ErrorType):
    """The extraction's statement, alive and not returned, lacks part of the gold. One that keeps what the
    question asks about (keeping busy) was there to be found by it: the search that passed over it missed the
    fact. One that keeps none of it (neither busy nor the pottery break) gave the question nothing to find it
    by, nor a reader anything to tie it to the question: the extraction lost the fact for this question."""
    system = _Mem0(tracer_provider)
    system.add("D17:10", said, fact)
    system.add("D17:11", "[13 October 2023] Melanie: My pottery class made a black and white bowl.",
               "Melanie made a black and white bowl in her pottery class (13 October 2023).")
    system.ask("What does Melanie do to keep herself busy during her pottery break?",
               "Read a book and paint.", ["D17:10"], ["D17:11"],
               prediction="Melanie made a black and white bowl in her pottery class")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type), verdict.explanation


ROUTINE_SAID = ("[25 February 2023] Deborah: In the morning, I meditate, do yoga, and teach classes. And "
                "yesterday I went for a morning jog for the first time in a nearby park. I will now "
                "incorporate this into my daily routine. And in the evenings, I spend time with loved ones.")
JOG_FACT = ("Deborah went for a morning jog in a nearby park for the first time and plans to include it in "
            "her daily routine (24 February 2023).")


@pytest.mark.parametrize(("fact", "blamed", "error_type"), [
    (JOG_FACT, "extract D7:18", ErrorType.EXTRACTION),
    (JOG_FACT.removesuffix(".") + "; in the evenings she spends time with loved ones.", "answer",
     ErrorType.RESPONSE),
])
def test_a_carrier_of_the_sentence_without_the_answer_its_message_said_beside_it_is_the_extractions_loss(
        tracer_provider, span_exporter, fact: str, blamed: str, error_type: ErrorType):
    """The evidence sentence that best matches the question (the morning jog) holds one gold word ("time",
    of "the first time"); the message says the answer in another sentence. An extraction that kept the jog
    and none of the evenings with loved ones wrote a fragment the answer could not come from, though the
    presence test sees it carry the sentence's fact: the reader whose context held it is not to blame, the
    extraction is (ExtractionError). One that kept the evenings too gave the reader the answer, and the
    reader that answered with the jog is to blame (ResponseError)."""
    system = _Mem0(tracer_provider)
    system.add("D7:18", ROUTINE_SAID, fact)
    system.add("D7:19", "[25 February 2023] Deborah: I also bought a new yoga mat last week.",
               "Deborah bought a new yoga mat (the week before 25 February 2023).")
    system.ask("What activity does Deborah incorporate into her daily routine after going for a morning jog "
               "in the park?", "spending time with loved ones", ["D7:18"], ["D7:19", "D7:18"],
               prediction="Deborah went for a morning jog in a nearby park")
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type), verdict.explanation


CAREER_SAID = ("[16 July 2023] John: So much has happened in the last month [June 2023] - on and off the "
               "court. Last week [the week before 16 July 2023] I scored 40 points, my highest ever.")


@pytest.mark.parametrize(("prediction", "blamed", "error_type"), [
    ("John had a career-high in assists last Friday during a big game", "extract D3:1", ErrorType.EXTRACTION),
    ("John loves Hawaiian pizza with his friends", "answer", ErrorType.RESPONSE),
])
def test_a_reader_that_gave_back_the_line_most_about_the_question_was_not_the_one_that_failed(
        tracer_provider, span_exporter, prediction: str, blamed: str, error_type: ErrorType):
    """The extraction's statement holds the whole gold ("June 2023") and the reader had it, beside a line more
    about the question ("career-high", "game"). A reader that gave that line back answered from where the
    context spoke of what was asked: the statement, written without what tied it to the question, did not
    read as the answer, and the extraction failed first. A reader that gave back a line less about the
    question (the pizza) had the answer and misread it: its own mistake."""
    system = _Mem0(tracer_provider)
    system.add("D3:1", CAREER_SAID, "John scored 40 points in a game last week, his highest ever (June 2023; "
               "the week before 16 July 2023).")
    system.add("D9:5", "[11 December 2023] John: I had a career-high in assists last Friday in our big game "
               "against our rival.", "John had a career-high in assists last Friday during a big game "
               "against their rival (the friday before 11 December 2023).")
    system.add("D9:7", "[11 December 2023] John: Hawaiian pizza with my friends is the best.",
               "John loves Hawaiian pizza with his friends (11 December 2023).")
    for n, (who, what) in enumerate((("John", "went to a concert"), ("Tim", "visited Paris"),
                                     ("John", "bought new shoes"), ("Tim", "read a fantasy novel"))):
        # mem0 dates every fact: a month is a common word in memory, not a rare one to tell a fact by.
        system.add(f"D2:{n}", f"[{10 + n} June 2023] {who}: I {what.split(' ', 1)[1]}.",
                   f"{who} {what} ({10 + n} June 2023).")
    # A turn of the same day saying "month": memory tells which event the month is of (`untold_event`).
    system.add("D3:2", "[16 July 2023] Tim: What a month for you!",
               "Tim said John had quite a month (16 July 2023).")
    system.ask("In which month's game did John achieve a career-high score in points?", "June 2023", ["D3:1"],
               ["D9:5", "D3:1", "D9:7"], prediction=prediction)
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type), verdict.explanation


@pytest.mark.parametrize(("reply_on", "blamed", "error_type"), [
    ("10 August 2022", "search John", ErrorType.RETRIEVAL),
    ("2 September 2022", "extract D19:14", ErrorType.EXTRACTION),
])
def test_the_other_speakers_reply_beside_the_evidence_stating_the_gold_held_the_answer(
        tracer_provider, span_exporter, reply_on, blamed, error_type):
    """James's turn says he will call the girl; his extraction wrote only about asking her out. John's reply,
    stored as John's memory (one memory user per speaker), says the answer back to him ("be sure to call
    her"), naming neither James nor anything else the question asks by: said in the turn beside the
    evidence, it held the answer, and the search of John's memory passed over it. The same words said on
    another day are another occasion's: nothing ties them to the question, and the extraction stays at
    fault."""
    system = _Mem0(tracer_provider)
    system.add("D19:14", "[10 August 2022] James: Yes, we had fun and I even met one beautiful girl. I'm "
               "thinking of asking her out on a date! She left me her phone number, I think I'll call "
               "tomorrow.",
               "James is considering asking a girl named Samantha out on a date after they met at the beach "
               "outing (10 August 2022).", store="James")
    system.add("D19:15", f"[{reply_on}] John: Be sure to call her, everything will work out!",
               f"John mentioned that be sure to call her, everything will work out! ({reply_on}).",
               store="John")
    system.add("D20:1", "[2 September 2022] James: I adopted a puppy named Max last week.",
               "James adopted a puppy named Max (2 September 2022).", store="James")
    system.add("D20:2", "[2 September 2022] John: I started a new job at the bank.",
               "John started a new job at the bank (2 September 2022).", store="John")
    system.ask("What is James planning to do after receiving Samantha's phone number?", "call her",
               ["D19:14"], [], stores={"James": ["D20:1"], "John": ["D20:2"]})
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)


@pytest.mark.parametrize(("named", "blamed", "error_type"), [
    ("[21 October 2022] Joanna: The name helps me remember her, back when I could hold an animal without "
     "sneezing!", "search", ErrorType.RETRIEVAL),
    ("[21 October 2022] Joanna: I named my stuffed animal dog Tilly, after my old dog.", "extract D24:6",
     ErrorType.EXTRACTION),
])
def test_a_turn_beside_an_evidence_turn_not_saying_the_answer_held_it(
        tracer_provider, span_exporter, named, blamed, error_type):
    """The evidence id names a turn that says little of the answer ("the name helps me remember her"), and
    its extraction wrote nothing. Nate's reply said it back ("a stuffed animal dog named Tilly"), and that
    unit was stored: the answer was in memory, and the search passed over it. When the named turn itself
    says the answer, its extraction that wrote nothing dropped it: a reply beside does not excuse that."""
    system = _Mem0(tracer_provider)
    system.add("D24:5", "[21 October 2022] Nate: What's the name of your stuffed animal?", None)
    system.add("D24:6", named, None)
    system.add("D24:7", "[21 October 2022] Nate: A stuffed animal dog named Tilly, what a sweet way to "
               "remember her!", "Nate mentioned that a stuffed animal dog named Tilly is a sweet way to "
               "remember her (21 October 2022).")
    system.add("D25:1", "[2 November 2022] Joanna: I finished the first draft of my screenplay.",
               "Joanna finished the first draft of her screenplay (2 November 2022).")
    system.ask("What does Joanna use to remember her dog from Michigan?", "naming a stuffed animal dog Tilly",
               ["D24:6"], ["D25:1"])
    verdict = verdict_of(span_exporter)
    assert (verdict.operation, verdict.error_type) == (system.ops[blamed], error_type)
