"""A small memory pipeline run through MemoryTracer, shared by the tests of readers and graphs."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

from memtrace_otel import Category, MemoryTracer, VariableKind


def run_pipeline(provider: TracerProvider, *, capture_content: bool = True) -> MemoryTracer:
    """Ingest three messages, extract, update one fact, delete one, answer two questions."""
    mt = MemoryTracer(provider, capture_content=capture_content)
    app = provider.get_tracer("scenario")
    records: dict[str, dict[str, object]] = {}
    with app.start_as_current_span("ingestion"):
        for dia_id, text in [("D1:1", "I moved to Lisbon"), ("D1:2", "I have a cat named Tom"),
                             ("D1:3", "I sold my bike")]:
            with mt.operation("ingest", Category.INGEST) as op:
                message = op.write(f"msg:{dia_id}", text, kind=VariableKind.MESSAGE)
            with mt.operation("extract", Category.EXTRACTION, gen_ai_operation="create_memory",
                              store_id="s") as op:
                op.read(message)
                prompt = op.intermediate("prompt", f"Extract facts: {text}", kind=VariableKind.PROMPT)
                unit = op.write(f"mem:{dia_id}", text.replace("I ", "User "), kind=VariableKind.MEMORY_UNIT)
                op.step("prompt", [message], [prompt])
                op.step("parse", [prompt], [unit])
                records[dia_id] = op.lineage_metadata(unit)
    with app.start_as_current_span("maintenance"):
        with mt.operation("update", Category.UPDATE, gen_ai_operation="update_memory", store_id="s") as op:
            old = op.read_record(records["D1:1"], content="User moved to Lisbon")
            records["D1:1"] = op.lineage_metadata(op.update(old, "User moved to Porto"))
        with mt.operation("delete", Category.DELETION, gen_ai_operation="delete_memory", store_id="s") as op:
            op.delete(op.read_record(records["D1:3"], content="User sold my bike"))
    questions = [("q1", "Where did the user move?", "Lisbon", "D1:1", "D1:1"),
                 ("q2", "What is the cat's name?", "Tom", "D1:2", "D1:2")]
    for case, question, gold, evidence, key in questions:
        with app.start_as_current_span(f"question {case}"):
            with mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                              store_id="s") as op:
                query = op.write(f"query:{case}", question, kind=VariableKind.QUERY)
                unit = op.read_record(records[key], content=None)
                context = op.write(f"context:{case}", str(unit.content), kind=VariableKind.CONTEXT)
            with mt.operation("generate", Category.GENERATION) as op:
                op.read(query)
                op.read(context)
                prediction = "Porto" if case == "q1" else "Tom"
                answer = op.write(f"answer:{case}", prediction, kind=VariableKind.ANSWER)
            with mt.operation("judge", Category.EVALUATION) as op:
                op.read(answer)
                passed = answer.content == gold
                op.record_evaluation(passed, score=float(passed), question=question,
                                     prediction=answer.content, gold=gold, evidence=[evidence],
                                     answer=answer, case_id=case)
    return mt
