"""A small memory agent, instrumented with memtrace-otel, that runs offline and gets some answers wrong.

It ingests a short chat in one trace per session (extract facts -> decide
ADD/UPDATE/DELETE -> store), then answers questions each in a trace of its own
(search memory -> answer -> judge against a gold answer). Memory records carry
their producer's traceparent, so the question traces link back to the
ingestion traces that wrote what they read.

Run it, then look at what went wrong::

    python examples/offline_memory_agent.py --out spans/
    memtrace inspect spans/
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

SESSIONS = [
    [("D1:1", "Hi! I moved to Lisbon in March."), ("D1:2", "My sister Ana is a nurse."),
     ("D1:3", "I adopted a dog called Pepper."), ("D1:4", "The weather was lovely today.")],
    [("D2:1", "I started learning the cello."), ("D2:2", "Ana moved to Porto last week."),
     ("D2:3", "I no longer have the old bike, I sold it."), ("D2:4", "I work as a data engineer.")],
    [("D3:1", "I adopted a second dog, a beagle."), ("D3:2", "My favourite food is grilled sardines."),
     ("D3:3", "I ran the Berlin marathon in 3 hours 20 minutes.")],
]
QUESTIONS = [
    ("q1", "Where did the user move in March?", "Lisbon", ["D1:1"]),
    ("q2", "What is the name of the user's dog?", "Pepper", ["D1:3"]),
    ("q3", "What instrument is the user learning?", "cello", ["D2:1"]),
    ("q4", "What does the user's sister do?", "nurse", ["D1:2"]),
    ("q5", "What is the user's job?", "data engineer", ["D2:4"]),
    ("q6", "What food does the user like most?", "grilled sardines", ["D3:2"]),
    ("q7", "How long did the user take to run the Berlin marathon?", "3 hours 20 minutes", ["D3:3"]),
]
_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "a", "an", "is", "to", "in", "of", "what", "does", "did", "user", "user's", "s", "i",
         "my", "do", "where", "which", "who", "name", "called"}


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


@dataclass
class Record:
    text: str
    metadata: dict[str, object] = field(default_factory=dict)


class TinyMemory:
    """A Mem0-shaped memory: facts extracted per message, one record per topic."""

    def __init__(self, tracer: MemoryTracer, app_tracer: trace.Tracer, evaluator: str | None = None) -> None:
        """``evaluator``: the name of an outside evaluator whose verdict lands as a GenAI
        ``gen_ai.evaluation.result`` event on the question's span (as online-evaluation services write
        it), instead of the agent's own judge operation."""
        self.tracer = tracer
        self.app_tracer = app_tracer
        self.evaluator = evaluator
        self.records: dict[str, Record] = {}

    def ingest(self, dia_id: str, text: str) -> None:
        with self.tracer.operation("agent.ingest", Category.INGEST) as op:
            message = op.write(f"msg:{dia_id}", text, kind=VariableKind.MESSAGE)
        with self.tracer.operation("agent.extract", Category.EXTRACTION) as op:
            op.read(message)
            # The extractor only keeps first-person statements: "My sister..." is lost here.
            fact = "User " + text.split(", ")[0][2:] if text.startswith("I ") else None
            if fact is None:
                op.set_outcome("no_fact")
                return
            facts = op.write(f"facts:{dia_id}", fact, kind=VariableKind.FACTS)
        self._store(facts, fact)

    def record_id(self, topic: str) -> str:
        """The store's id of a topic's record (the one thing a store with many users names apart)."""
        return f"mem:{topic}"

    def _store(self, facts_var: object, fact: str) -> None:
        # The topic key is the fact's verb: a later "adopted" fact overwrites the earlier one.
        record_id = self.record_id(fact.split()[1])
        existing = self.records.get(record_id)
        operation = "update_memory" if existing else "create_memory"
        category = Category.UPDATE if existing else Category.EXTRACTION
        with self.tracer.operation("agent.store", category, gen_ai_operation=operation,
                                   store_id="tiny-memory") as op:
            op.read(facts_var)
            if existing:
                unit = op.update(op.read_record(existing.metadata, content=existing.text), fact)
            else:
                unit = op.write(record_id, fact, kind=VariableKind.MEMORY_UNIT)
            self.records[record_id] = Record(fact, op.lineage_metadata(unit))

    def answer(self, case_id: str, question: str, gold: str, evidence: list[str]) -> bool:
        with self.app_tracer.start_as_current_span(f"question {case_id}") as turn:  # one trace per question
            with self.tracer.operation("agent.search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                                       store_id="tiny-memory") as op:
                query = op.write(f"query:{case_id}", question, kind=VariableKind.QUERY)
                scored = sorted(self.records.values(), key=lambda r: -len(words(r.text) & words(question)))
                hits = scored[:1]
                for record in hits:
                    op.read_record(record.metadata, content=record.text)
                context = op.write(f"context:{case_id}", "\n".join(r.text for r in hits),
                                   kind=VariableKind.CONTEXT)
            with self.tracer.operation("agent.generate", Category.GENERATION) as op:
                op.read(query)
                op.read(context)
                wanted = words(question)
                # Answer with the first context words the question did not already contain;
                # two words are too few for some answers.
                new_words = [w for w in _WORD.findall(context.content.lower())
                             if w not in wanted and w not in _STOP]
                prediction = " ".join(new_words[:2]) or "I don't know"
                answer = op.write(f"answer:{case_id}", prediction, kind=VariableKind.ANSWER)
            passed = gold.lower() in prediction.lower()
            if self.evaluator is not None:
                turn.add_event("gen_ai.evaluation.result", {
                    "gen_ai.evaluation.name": self.evaluator,
                    "gen_ai.evaluation.score.label": "pass" if passed else "fail",
                    "gen_ai.evaluation.score.value": 1.0 if passed else 0.0})
                return passed
            with self.tracer.operation("agent.judge", Category.EVALUATION) as op:
                op.read(answer)
                op.record_evaluation(passed, score=1.0 if passed else 0.0, question=question,
                                     prediction=prediction, gold=gold, evidence=evidence,
                                     answer=answer, case_id=case_id)
        return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="spans", help="directory for the OTLP/JSON span files")
    parser.add_argument("--no-content", action="store_true",
                        help="keep contents off the exported spans (the GenAI default)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "offline-memory-agent.jsonl")
    if os.path.exists(path):
        os.remove(path)
    provider = TracerProvider(resource=Resource.create({"service.name": "offline-memory-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    # A demo opts in to content capture so the report can show questions and answers.
    tracer = MemoryTracer(provider, capture_content=not args.no_content)
    app_tracer = provider.get_tracer("offline-memory-agent")
    memory = TinyMemory(tracer, app_tracer)
    for number, session in enumerate(SESSIONS, start=1):
        # Ordinary application spans: one trace per session; they stay out of the memory graph.
        with app_tracer.start_as_current_span(f"session {number}"):
            for dia_id, text in session:
                memory.ingest(dia_id, text)
    right = sum(memory.answer(case_id, q, gold, evidence) for case_id, q, gold, evidence in QUESTIONS)
    provider.shutdown()
    print(f"answered {right}/{len(QUESTIONS)} questions right; spans written to {path}")


if __name__ == "__main__":
    main()
