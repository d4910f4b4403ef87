"""A mem0 agent, traced by memtrace's mem0 instrumentor, that forgets where its user moved.

Runs fully offline with the real ``mem0ai`` (1.x or 2.x): mem0's LLM and embedder talk to
a small rule-based OpenAI-compatible server this script starts on 127.0.0.1, its vector
store is qdrant in local mode under a temporary directory, and mem0's telemetry is off.

The agent remembers two sessions, then a third in which the user mentions a weekend in
Porto. That is where it goes wrong: on mem0 1.x the memory LLM decides to UPDATE the
"moved to Lisbon" memory with the Porto trip (a bad update decision); on 2.x the agent's
own profile-merge calls ``memory.update`` on it. Asked where the user moved, the agent no
longer knows, and ``memtrace analyze`` names the mem0 operation that lost the fact::

    pip install '.[mem0]' mem0ai        # in a memtrace-otel checkout
    python examples/mem0_agent.py --out spans/
    memtrace analyze spans/

The only line that enables tracing is ``Mem0Instrumentor().instrument(...)`` (or run the
program under ``opentelemetry-instrument``); the answer and its verdict are the agent's
own operations, traced with the instrumentor's ``MemoryTracer``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

os.environ.setdefault("MEM0_TELEMETRY", "False")  # mem0's own telemetry would try the network

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from memtrace_otel import Category, VariableKind
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.extras import install_hint, missing_extra

try:  # the [mem0] extra: the instrumentor's own dependencies (mem0ai is the application's)
    from memtrace_otel.instrument.mem0 import Mem0Instrumentor, context_name, mem0_generation
except ImportError:
    raise SystemExit(missing_extra("examples/mem0_agent.py (the mem0 instrumentor)", "mem0")) from None

USER = "ana"
SESSIONS = ["I moved to Lisbon in March.", "I adopted a dog called Pepper.", "I visited Porto last weekend."]
QUESTION, GOLD = "Where did the user move in March?", "Lisbon"
DIMS = 16


# -- the stand-in LLM: a rule-based OpenAI-compatible server on loopback -------------------------
def embed(text: str) -> list[float]:
    """Words hashed into buckets, unit length: texts sharing words are close."""
    vector = [0.0] * DIMS
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[zlib.crc32(word.encode()) % DIMS] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def facts_of(prompt: str) -> list[str]:
    """Extraction: each first-person sentence of the last user message becomes a fact."""
    found = re.findall(r"user: (I [^\n]*?\.)", prompt)
    return [f"User {s[2:].rstrip('.')}" for s in found[-1:]]


def reply(prompt: str) -> dict[str, Any]:
    """What the stand-in LLM answers to mem0's prompts (extraction, or 1.x's update decision)."""
    marker = "determine whether these facts should be added"
    if marker in prompt:  # mem0 1.x asks for a decision per memory (Python reprs in its prompt)
        memory_part, facts_part = prompt.split(marker, 1)
        existing = re.findall(r"'id': '(\d+)', 'text': '([^']*)'", memory_part)
        facts = re.findall(r"'([^']+)'", facts_part.split("```")[1]) if "```" in facts_part else []
        decisions = [{"id": "new", "text": f, "event": "ADD"} for f in facts]
        lisbon = next((i for i, text in existing if "Lisbon" in text), None)
        if any("Porto" in f for f in facts) and lisbon is not None:
            # The faulty decision: one "location" memory per user, overwritten by a weekend trip.
            decisions = [{"id": lisbon, "text": facts[0], "event": "UPDATE"}]
        return {"memory": decisions}
    facts = facts_of(prompt)
    return {"facts": facts} if mem0_generation() == 1 else {"memory": [{"text": f} for f in facts]}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.endswith("/embeddings"):
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            answer: dict[str, Any] = {"object": "list", "model": "offline", "usage": {"prompt_tokens": 1,
                                      "total_tokens": 1}, "data": [
                {"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(inputs)]}
        else:
            prompt = "\n".join(str(m.get("content")) for m in body.get("messages", []))
            message = {"role": "assistant", "content": json.dumps(reply(prompt))}
            answer = {"id": "offline", "object": "chat.completion", "created": 0, "model": "offline",
                      "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# -- the agent ----------------------------------------------------------------------------------
def mem0_config(base_url: str, data: str) -> dict[str, Any]:
    openai = {"api_key": "offline", "openai_base_url": base_url}
    return {
        "llm": {"provider": "openai", "config": {"model": "offline", **openai}},
        "embedder": {"provider": "openai", "config": {"model": "offline", "embedding_dims": DIMS, **openai}},
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "agent", "path": f"{data}/qdrant", "embedding_model_dims": DIMS,
            "on_disk": True}},
        "history_db_path": f"{data}/history.db",
    }


def remember(memory: Any, text: str) -> None:
    added = memory.add(text, user_id=USER)["results"]
    if mem0_generation() >= 2 and "Porto" in text:
        # The agent's profile merge (2.x has no LLM update decision): one "location" per user.
        found = memory.search("Where does the user live?", filters={"user_id": USER})["results"]
        lisbon = next((m for m in found if "Lisbon" in m["memory"]), None)
        if lisbon is not None and added:
            memory.update(lisbon["id"], added[0]["memory"])


def ask(memory: Any, instrumentor: Mem0Instrumentor) -> bool:
    scope = {"user_id": USER} if mem0_generation() == 1 else {"filters": {"user_id": USER}}
    with trace.get_tracer("mem0_agent").start_as_current_span("agent.question"):
        found = memory.search(QUESTION, **scope)["results"]
        tracer = instrumentor.memory_tracer
        assert tracer is not None
        with tracer.operation("agent.answer", Category.GENERATION) as op:
            op.read(f"question:{QUESTION}", content=QUESTION, kind=VariableKind.QUERY)
            op.read(context_name(QUESTION, user_id=USER))  # what the search returned
            context = " ".join(m["memory"] for m in found)
            prediction = GOLD if GOLD in context else "I don't know."
            answer = op.write("answer:q1", prediction, kind=VariableKind.ANSWER)
        with tracer.operation("agent.judge", Category.EVALUATION) as op:
            op.read(answer)
            passed = GOLD.lower() in prediction.lower()
            op.record_evaluation(passed, question=QUESTION, prediction=prediction, gold=GOLD, answer=answer)
    print(f"Q: {QUESTION}\nA: {prediction}  ({'correct' if passed else 'wrong'}; memories: "
          f"{[m['memory'] for m in found]})")
    return passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="spans", help="directory for the OTLP/JSON span file")
    parser.add_argument("--no-analyze", action="store_true", help="only write the spans")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # A demo: contents on the spans, so the verdict can quote them.
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    provider = TracerProvider(resource=Resource.create({"service.name": "mem0-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(f"{args.out}/mem0_agent.jsonl")))
    trace.set_tracer_provider(provider)
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=provider)  # the one line that traces mem0

    try:
        from mem0 import Memory
    except ImportError:
        raise SystemExit(f"examples/mem0_agent.py needs mem0ai 1.x or 2.x: pip install mem0ai "
                         f"(and the [mem0] extra: {install_hint('mem0')})") from None

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as data:
        memory = Memory.from_config(mem0_config(f"http://127.0.0.1:{server.server_address[1]}/v1", data))
        for text in SESSIONS:
            remember(memory, text)
        ask(memory, instrumentor)
        getattr(memory, "close", lambda: None)()
    server.shutdown()
    provider.shutdown()
    print(f"spans: {args.out}/mem0_agent.jsonl (mem0ai {mem0_generation()}.x)")
    if args.no_analyze:
        return 0
    return subprocess.run([sys.executable, "-m", "memtrace_otel", "analyze", args.out]).returncode


if __name__ == "__main__":
    sys.exit(main())
