"""The app: a LoCoMo conversation through the real mem0, run with a mem0 venv's python.

``python -m memtrace_bench.mem0_real.driver --conversation 26 --data DIR --result FILE ...``

Shaped like real mem0 apps (and mem0's own LoCoMo evaluation): one mem0 user per speaker, one
``add`` per turn (its own trace), the turn's LoCoMo id given through
``metadata={"memtrace_message_ids": [dia_id]}``; per question (categories 1-4) one ``search`` per
speaker, one answer call and one judge call through the ``openai`` client, and
``record_evaluation`` with LoCoMo's evidence ids. The LLM is :class:`~.server.SimulatedLLM`,
started here; spans go to OTLP/JSON Lines with content capture on.

Replays: ``--from-session K`` resumes from a copy of the store made before session K
(``--snapshots`` writes them), ``--repair CALL`` answers a call by its oracle, ``--trials FILE``
asks questions with per-question repairs (``q12/search/<speaker>``: an oracle search that also
returns the speaker's live memories holding the question's key facts; ``q12/answer``).

Deterministic: span and trace ids come from a seeded generator, and mem0's record ids (``uuid4``)
from a seeded sequence, so the same seed gives the same spans' ids and the same labels.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import uuid
from typing import Any

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator

from memtrace_bench.mem0_real.server import SimulatedLLM
from memtrace_bench.mem0_real.world import EMBEDDING_DIMS, World, message_text
from memtrace_otel.semconv import Category, GenAI, MemTrace, VariableKind

ANSWER_PROMPT = """You are an intelligent memory assistant tasked with retrieving accurate information from \
conversation memories. Answer the question from the memories below, in a few words.

{memories}

Question: {question}
Answer:"""
JUDGE_PROMPT = """Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. Be generous: an \
answer that touches the same topic as the gold answer counts as CORRECT. Return JSON {{"label": ...}}.

Question: {question}
Gold answer: {gold}
Generated answer: {answer}
"""
TOP_K = 10
"""Memories per speaker's search: mem0's own LoCoMo evaluation searches each speaker with its
``MemorySearch`` default ``top_k=10`` (its script runs 30)."""
ALL = 100_000


class SeededIds(IdGenerator):
    """Span and trace ids from a seeded generator (the default one is random per process)."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(f"mem0-real-ids-{seed}")

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


class Collect(SpanProcessor):
    """Keeps each finished span's name, ids and record id: which span a faulty call's effect is."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        context = span.context  # always set on a ReadableSpan (get_span_context() is typed Optional)
        self.spans.append({"name": str(attributes.get(MemTrace.OPERATION_NAME, span.name)),
                           "trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
                           "record": attributes.get(GenAI.MEMORY_RECORD_ID),
                           "user": None})


def seed_uuids(seed: int, start: int) -> None:
    """mem0 names records with ``uuid.uuid4()``: a seeded sequence makes builds reproducible
    (``start`` keeps a replay's ids apart from the run it resumes)."""
    rng = random.Random(f"mem0-real-uuid-{seed}-{start}")
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)  # type: ignore[assignment]


def mem0_config(llm_url: str, data: str) -> dict[str, Any]:
    openai = {"api_key": "sim-key", "openai_base_url": llm_url}
    return {
        "llm": {"provider": "openai", "config": {"model": "sim-llm", "temperature": 0, **openai}},
        "embedder": {"provider": "openai",
                     "config": {"model": "sim-embedding", "embedding_dims": EMBEDDING_DIMS, **openai}},
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "memories", "path": os.path.join(data, "qdrant"),
            "embedding_model_dims": EMBEDDING_DIMS, "on_disk": True}},
        "history_db_path": os.path.join(data, "history.db"),
    }


class App:
    def __init__(self, args: argparse.Namespace, world: World, llm: SimulatedLLM, generation: int) -> None:
        from openai import OpenAI

        from memtrace_otel.instrument.mem0 import Mem0Instrumentor

        self.args, self.world, self.llm, self.generation = args, world, llm, generation
        self.collect = Collect()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "mem0-real-app"}),
                                       id_generator=SeededIds(args.seed * 1000 + args.from_session))
        self.provider.add_span_processor(self.collect)
        if args.spans:
            from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

            self.provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(args.spans)))
        trace.set_tracer_provider(self.provider)
        self.instrumentor = Mem0Instrumentor()
        # add's stages as spans, as the benchmark was built: its labels name the mem0.add.extract span
        # (Collect keeps spans). The default shape (stages as events of the add span) builds the
        # same graph (tests/mem0/test_mem0_stage_shape.py), but labels would then name stage ids.
        self.instrumentor.instrument(tracer_provider=self.provider, stage_spans=True)
        self.client = OpenAI(base_url=llm.base_url, api_key="sim-key", max_retries=0)
        self.memory: Any = None

    def open(self) -> None:
        from mem0 import Memory

        self.memory = Memory.from_config(mem0_config(self.llm.base_url, self.args.data))

    def close(self) -> None:
        if self.memory is not None:
            close = getattr(self.memory, "close", None)
            if callable(close):
                close()
            client = getattr(getattr(self.memory, "vector_store", None), "client", None)
            if client is not None and hasattr(client, "close"):
                client.close()
            self.memory = None

    # -- ingestion -------------------------------------------------------------------------------
    def ingest(self, calls: list[dict[str, Any]]) -> None:
        sessions = [s for s in self.world.conversation.sessions if s.index >= self.args.from_session]
        if sessions:
            self.llm.seek(sessions[0].turns[0].dia_id if sessions[0].turns else "")
        for session in sessions:
            if self.args.snapshots:
                self.close()
                shutil.copytree(self.args.data, os.path.join(self.args.snapshots, f"s{session.index}"),
                                dirs_exist_ok=True)
                self.open()
            when = self.world.when.get(session.index, session.date)
            for turn in session.turns:
                first = len(self.llm.calls)
                spans_before = len(self.collect.spans)
                message = {"role": "user", "content": message_text(when, turn.speaker, turn.text)}
                result = self.memory.add([message], user_id=turn.speaker,
                                         metadata={"timestamp": when, "memtrace_message_ids": [turn.dia_id]})
                spans = self.collect.spans[spans_before:]
                for call in self.llm.calls[first:]:
                    if call["fault"] is not None:
                        call["session"], call["span"] = session.index, effect_span(call, result, spans)
                        call["user"] = turn.speaker
                        calls.append(call)
            print(f"session {session.index} done", file=sys.stderr, flush=True)

    # -- questions -------------------------------------------------------------------------------
    def ask(self, qa: Any, repairs: frozenset[str]) -> dict[str, Any]:
        tracer = self.instrumentor.memory_tracer
        assert tracer is not None
        from memtrace_otel.instrument.mem0 import context_name

        case_id = self.world.case_id(qa)
        self.llm.repaired = set(self.args.repair) | set(repairs)
        spans_before = len(self.collect.spans)
        with trace.get_tracer("mem0-real-app").start_as_current_span("app.question"):
            found: dict[str, list[tuple[str, str]]] = {}
            for speaker in self.world.conversation.speakers:
                scope = {"user_id": speaker} if self.generation == 1 else {"filters": {"user_id": speaker}}
                limit = {"limit": self.args.top_k} if self.generation == 1 else {"top_k": self.args.top_k}
                items = self.memory.search(qa.question, **scope, **limit)["results"]
                returned = [(item["memory"], timestamp_of(item)) for item in items]
                if f"q{qa.index}/search/{speaker}" in repairs:
                    returned = self.oracle_search(qa, speaker, returned)
                found[speaker] = returned
            with tracer.operation("app.answer", Category.GENERATION) as op:
                op.read(f"question:q{qa.index}", content=qa.question, kind=VariableKind.QUERY)
                for speaker in self.world.conversation.speakers:
                    op.read(context_name(qa.question, user_id=speaker))
                # As mem0's own LoCoMo evaluation shows them: "timestamp: memory", per speaker.
                memories = "\n\n".join(f"Memories for user {s}:\n" + "\n".join(
                    f"- {stamp}: {text}" if stamp else f"- {text}" for text, stamp in returned)
                    for s, returned in found.items())
                prediction = self.complete(ANSWER_PROMPT.format(memories=memories, question=qa.question))
                answer = op.write(f"answer:q{qa.index}", prediction, kind=VariableKind.ANSWER)
            verdict = self.complete(JUDGE_PROMPT.format(question=qa.question, gold=qa.answer,
                                                        answer=prediction))
            passed = '"CORRECT"' in verdict
            with tracer.operation("app.judge", Category.EVALUATION) as op:
                op.read(answer)
                op.record_evaluation(passed, question=qa.question, prediction=prediction, gold=str(qa.answer),
                                     evidence=list(qa.evidence), answer=answer, case_id=case_id)
        spans = self.collect.spans[spans_before:]
        searches = [s for s in spans if s["name"] == "mem0.search"]
        return {"question": qa.index, "case_id": case_id, "passed": passed, "prediction": prediction,
                "found": {s: [text for text, _ in returned] for s, returned in found.items()}, "spans": {
                    "search": {sp: span for sp, span in zip(self.world.conversation.speakers, searches,
                                                              strict=False)},
                    "answer": next((s for s in spans if s["name"] == "app.answer"), None)}}

    def oracle_search(self, qa: Any, speaker: str,
                      returned: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The search's oracle: what a correct retriever returns, the speaker's live memories that
        answer for a key fact, then what the search returned, top k (more only when more memories
        are needed). A memory lost upstream is not alive and cannot be returned."""
        # every record: get_all's default page (1.x 100, 2.x 20) would hide a long conversation's memories
        options = ({"user_id": speaker, "limit": ALL} if self.generation == 1
                   else {"filters": {"user_id": speaker}, "top_k": ALL})
        listing = self.memory.get_all(**options)["results"]
        alive = sorted(((item["memory"], timestamp_of(item)) for item in listing), key=str)
        holding = [m for m in alive if self.world.relevant(qa, f"{m[1]}: {m[0]}")]
        rest = [m for m in returned if m not in holding]
        return holding + rest[:max(0, self.args.top_k - len(holding))]

    def complete(self, prompt: str) -> str:
        response = self.client.chat.completions.create(model="sim-llm", temperature=0,
                                                       messages=[{"role": "user", "content": prompt}])
        return response.choices[0].message.content or ""


def timestamp_of(item: dict[str, Any]) -> str:
    """The ``timestamp`` the app gave a memory (its metadata; mem0 1.x also lifts it to the item)."""
    metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
    return str((metadata or {}).get("timestamp") or item.get("timestamp") or "")


def effect_span(call: dict[str, Any], result: Any, spans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The span the instrumentor emitted for a faulty call's effect: the extraction step for a fact
    fault; the ``mem0.update`` / ``mem0.delete`` of the record a wrong decision changed."""
    if call["kind"] == "extract":
        return next((s for s in spans if s["name"] == "mem0.add.extract"), None)
    effect = call.get("effect") or {}
    items = result.get("results", []) if isinstance(result, dict) else []
    name = {"UPDATE": "mem0.update", "DELETE": "mem0.delete"}.get(effect.get("event", ""))
    for item in items:
        if item.get("event") == effect.get("event") and item.get("memory") == effect.get("text"):
            match = [s for s in spans if s["name"] == name and s["record"] == item.get("id")]
            if match:
                return match[0]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--locomo", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-sessions", type=int, default=None)
    parser.add_argument("--data", required=True, help="mem0's storage (qdrant, history db)")
    parser.add_argument("--result", required=True, help="JSON written here")
    parser.add_argument("--spans", default=None, help="OTLP/JSON Lines span file")
    parser.add_argument("--snapshots", default=None, help="copy the store here before each session")
    parser.add_argument("--from-session", type=int, default=0)
    parser.add_argument("--top-k", type=int, default=TOP_K, help="memories per speaker's search")
    parser.add_argument("--repair", action="append", default=[], help="call id answered by its oracle")
    parser.add_argument("--questions", default=None, help="comma-separated question indexes (default all)")
    parser.add_argument("--trials", default=None, help="JSON [[question, [repairs]], ...] after ingestion")
    args = parser.parse_args(argv)
    from memtrace_otel.instrument.mem0 import mem0_generation

    generation = mem0_generation()
    world = World.load(args.conversation, seed=args.seed, directory=args.locomo,
                       max_sessions=args.max_sessions)
    seed_uuids(args.seed, args.from_session)
    os.makedirs(args.data, exist_ok=True)
    with SimulatedLLM(world, repaired=frozenset(args.repair)) as llm:
        app = App(args, world, llm, generation)
        app.open()
        calls: list[dict[str, Any]] = []
        try:
            app.ingest(calls)
            by_index = {qa.index: qa for qa in world.questions()}
            if args.trials:
                with open(args.trials, encoding="utf-8") as handle:
                    trials = [(int(q), frozenset(r)) for q, r in json.load(handle)]
            else:
                wanted = ([int(x) for x in args.questions.split(",") if x] if args.questions is not None
                          else sorted(by_index))
                trials = [(q, frozenset()) for q in wanted]
            answers = []
            for number, (index, repairs) in enumerate(trials, 1):
                answers.append({**app.ask(by_index[index], repairs), "repairs": sorted(repairs)})
                if number % 25 == 0:
                    print(f"questions {number}/{len(trials)}", file=sys.stderr, flush=True)
            answer_calls = {c["call_id"]: c for c in llm.calls if c["kind"] == "answer"}
        finally:
            app.close()
            app.provider.shutdown()
    tally: dict[str, int] = {}
    for call in llm.calls:
        events = [d.get("event") for d in call["returned"]] if call["kind"] == "decide" else [call["kind"]]
        for key in [*events, f"fault:{call['fault']}" if call["fault"] else None]:
            if key:
                tally[key] = tally.get(key, 0) + 1
    result = {"generation": generation, "calls": calls, "answers": answers, "tally": tally,
              "answer_faults": {k: v["fault"] for k, v in sorted(answer_calls.items()) if v["fault"]}}
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
