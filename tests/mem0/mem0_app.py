"""A mem0 application for the generation tests: one phase per process, spans to an OTLP/JSON file.

Run as ``python mem0_app.py PHASE --llm URL --data DIR --out FILE [--record ID]`` from
``tests/mem0/``: each phase is what a separate process of a real application does
(ingest a session, change a memory, answer a question), so lineage between them
travels only through the records' metadata. mem0's LLM and embedder point at the
test's local OpenAI-compatible server; qdrant and the history database live in
``DIR``. The answer step is the application's own code, traced with the
instrumentor's :class:`~memtrace_otel.MemoryTracer`, and its verdict is what
``memtrace analyze`` explains.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

os.environ.setdefault("MEM0_TELEMETRY", "False")

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel import Category, VariableKind
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.instrument.mem0 import Mem0Instrumentor, context_name, mem0_generation

# tests/ (for the local server's constants), also when this runs as a script
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from openai_server import EMBEDDING_DIMENSIONS

USER = "alice"
QUESTION = "Where did the user move in March?"
GOLD = "Lisbon"
EMBEDDING_DIMS: int = EMBEDDING_DIMENSIONS  # the vectors the test server's /v1/embeddings returns


def config(llm_url: str, data: str) -> dict[str, Any]:
    """mem0 fully offline: LLM and embedder on the local server, qdrant and history under ``data``."""
    openai = {"api_key": "test-key", "openai_base_url": llm_url}
    return {
        "llm": {"provider": "openai", "config": {"model": "scripted", **openai}},
        "embedder": {"provider": "openai",
                     "config": {"model": "scripted-embedding", "embedding_dims": EMBEDDING_DIMS, **openai}},
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "memories", "path": os.path.join(data, "qdrant"),
            "embedding_model_dims": EMBEDDING_DIMS, "on_disk": True}},
        "history_db_path": os.path.join(data, "history.db"),
    }


def scope(**filters: Any) -> dict[str, Any]:
    """Search/get_all scoping: top-level ids on 1.x, ``filters=`` on 2.x."""
    return filters if mem0_generation() == 1 else {"filters": filters}


def answer(instrumentor: Mem0Instrumentor, memory: Any, *, threshold: float | None) -> dict[str, Any]:
    """Search, answer from what came back, judge against the gold answer."""
    options: dict[str, Any] = scope(user_id=USER)
    if threshold is not None:
        options["threshold"] = threshold
    found = memory.search(QUESTION, **options)["results"]
    context = " ".join(item["memory"] for item in found)
    tracer = instrumentor.memory_tracer
    assert tracer is not None
    with tracer.operation("app.answer", Category.GENERATION) as op:
        op.read(f"question:{QUESTION}", content=QUESTION, kind=VariableKind.QUERY)
        op.read(context_name(QUESTION, user_id=USER))
        prediction = GOLD if GOLD.lower() in context.lower() else "I don't know."
        answer_var = op.write("answer:q1", prediction, kind=VariableKind.ANSWER)
    with tracer.operation("app.judge", Category.EVALUATION) as op:
        op.read(answer_var)
        passed = GOLD.lower() in prediction.lower()
        op.record_evaluation(passed, question=QUESTION, prediction=prediction, gold=GOLD, answer=answer_var,
                             case_id="q1")
    return {"prediction": prediction, "passed": passed, "found": [item["id"] for item in found]}


def run(phase: str, memory: Any, instrumentor: Mem0Instrumentor, args: argparse.Namespace) -> Any:
    if phase == "add":
        return memory.add(args.text, user_id=USER)
    if phase == "update":
        return memory.update(args.record, args.text)
    if phase == "delete":
        return memory.delete(args.record)
    if phase == "ask":
        # One request, one trace: the search, the answer and the verdict share it.
        with trace.get_tracer("mem0_app").start_as_current_span("app.question"):
            return answer(instrumentor, memory, threshold=args.threshold)
    raise SystemExit(f"unknown phase {phase!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=("add", "update", "delete", "ask"))
    parser.add_argument("--llm", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--text", default="")
    parser.add_argument("--record", default="")
    parser.add_argument("--threshold", type=float, default=None)
    args = parser.parse_args(argv)
    provider = TracerProvider(resource=Resource.create({"service.name": f"mem0-app-{args.phase}"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(args.out)))
    trace.set_tracer_provider(provider)
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=provider)
    from mem0 import Memory

    memory = Memory.from_config(config(args.llm, args.data))
    try:
        result = run(args.phase, memory, instrumentor, args)
    finally:
        close = getattr(memory, "close", None)
        if callable(close):
            close()
        provider.shutdown()
    json.dump(result, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
