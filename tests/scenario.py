"""A small memory pipeline run through MemoryTracer, shared by the tests of readers and graphs."""

from __future__ import annotations

import random
from contextlib import suppress

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.instrument import RetrievedRecord
from memtrace_otel.semconv import GenAIOperation

MODEL = "stub-llm-1"
"""The model the pipeline's LLM-backed steps say they called (no model is called)."""
PROVIDER = "openai"


class SeededIds(IdGenerator):
    """Span and trace ids from one seeded generator: two runs of one program get the same ids."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


def run_pipeline(provider: TracerProvider, *, capture_content: bool = True,
                 store_id: str = "s") -> MemoryTracer:
    """Ingest three messages, extract, update one fact, delete one, answer two questions.

    Runs that share a service and a backend (serve searches it by store) need a ``store_id``
    each: the record names are the same in every run, so two runs on one store are one memory.
    """
    mt = MemoryTracer(provider, capture_content=capture_content)
    app = provider.get_tracer("scenario")
    records: dict[str, dict[str, object]] = {}
    with app.start_as_current_span("ingestion"):
        for dia_id, text in [("D1:1", "I moved to Lisbon"), ("D1:2", "I have a cat named Tom"),
                             ("D1:3", "I sold my bike")]:
            with mt.operation("ingest", Category.INGEST) as op:
                message = op.write(f"msg:{dia_id}", text, kind=VariableKind.MESSAGE)
            with mt.operation("extract", Category.EXTRACTION, gen_ai_operation="create_memory",
                              store_id=store_id) as op:
                op.read(message)
                prompt = op.intermediate("prompt", f"Extract facts: {text}", kind=VariableKind.PROMPT)
                op.record_llm_call(model=MODEL, provider=PROVIDER, input_tokens=40, output_tokens=9)
                unit = op.write(f"mem:{dia_id}", text.replace("I ", "User "), kind=VariableKind.MEMORY_UNIT)
                op.record_memory(record_id=unit.name, count=1)
                op.step("prompt", [message], [prompt])
                op.step("parse", [prompt], [unit])
                records[dia_id] = op.lineage_metadata(unit)
    with app.start_as_current_span("maintenance"):
        with mt.operation("update", Category.UPDATE, gen_ai_operation="update_memory", store_id=store_id,
                          record_id="mem:D1:1") as op:
            old = op.read_record(records["D1:1"], content="User moved to Lisbon")
            records["D1:1"] = op.lineage_metadata(op.update(old, "User moved to Porto"))
            op.record_memory(count=1)
        with mt.operation("delete", Category.DELETION, gen_ai_operation="delete_memory", store_id=store_id,
                          record_id="mem:D1:3") as op:
            op.delete(op.read_record(records["D1:3"], content="User sold my bike"))
            op.record_memory(count=1)
    questions = [("q1", "Where did the user move?", "Lisbon", "D1:1", "D1:1"),
                 ("q2", "What is the cat's name?", "Tom", "D1:2", "D1:2")]
    for case, question, gold, evidence, key in questions:
        with app.start_as_current_span(f"question {case}"):
            with mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                              store_id=store_id) as op:
                query = op.write(f"query:{case}", question, kind=VariableKind.QUERY)
                unit = op.read_record(records[key], content=None)
                context = op.write(f"context:{case}", str(unit.content), kind=VariableKind.CONTEXT)
                op.record_retrieval([RetrievedRecord(unit, score=0.8)], query=query, top_k=1)
            with mt.operation("generate", Category.GENERATION) as op:
                op.read(query)
                op.read(context)
                prediction = "Porto" if case == "q1" else "Tom"
                op.record_llm_call(model=MODEL, provider=PROVIDER, input_tokens=60, output_tokens=2,
                                   response_model=f"{MODEL}-0613")
                answer = op.write(f"answer:{case}", prediction, kind=VariableKind.ANSWER)
            with mt.operation("judge", Category.EVALUATION) as op:
                op.read(answer)
                passed = answer.content == gold
                op.record_evaluation(passed, score=float(passed), question=question,
                                     prediction=answer.content, gold=gold, evidence=[evidence],
                                     answer=answer, case_id=case,
                                     explanation=None if passed else f"the user moved to {gold} first")
    return mt


def run_more(mt: MemoryTracer, provider: TracerProvider) -> None:
    """What :func:`run_pipeline` leaves out: a document retrieval from a remote store, a no-op decision,
    a chat step, a delete of several records, a failing operation.

    A separate trace, so the pipeline's own traces (which other tests count) stay as they are.
    """
    app = provider.get_tracer("scenario")
    with app.start_as_current_span("question q3"):
        with mt.operation("rag.search", Category.RETRIEVAL, gen_ai_operation=GenAIOperation.RETRIEVAL,
                          data_source_id="docs-index", provider="chroma", server_address="chroma.internal",
                          server_port=8000) as op:
            question = op.read("query:q3", content="Which city is sunnier?", kind=VariableKind.QUERY)
            found = [op.read(name, content=text, kind=VariableKind.CONTEXT)
                     for name, text in (("doc:lisbon", "Lisbon has 2,800 sunshine hours."),
                                        ("doc:porto", "Porto has 2,500 sunshine hours."))]
            scored = [RetrievedRecord(doc, score=score) for doc, score in zip(found, (0.9, 0.7), strict=True)]
            op.record_retrieval(scored, query=question, top_k=2, data_source_id="docs-index")
        with mt.operation("decide", Category.UPDATE, gen_ai_operation=GenAIOperation.UPSERT_MEMORY,
                          store_id="s") as op:
            op.read(question)
            op.set_outcome("noop")
        with mt.operation("rag.answer", Category.GENERATION, gen_ai_operation=GenAIOperation.CHAT) as op:
            op.read(question)
            op.record_llm_call(model=MODEL, provider=PROVIDER, input_tokens=30, output_tokens=4)
            op.write("answer:q3", "Lisbon", kind=VariableKind.ANSWER)
        with mt.operation("forget", Category.DELETION, gen_ai_operation=GenAIOperation.DELETE_MEMORY,
                          store_id="s") as op:
            doomed = [op.write(f"mem:tmp{i}", f"temporary {i}", kind=VariableKind.MEMORY_UNIT)
                      for i in (1, 2)]
            for unit in doomed:
                op.delete(unit)
            op.record_memory(count=len(doomed))  # several records: a count, no record id
        with suppress(TimeoutError), mt.operation("rerank", Category.RERANK) as op:
            op.read(question)
            raise TimeoutError("reranker did not answer")
