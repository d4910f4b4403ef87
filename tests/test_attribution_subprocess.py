"""Attribution in fresh processes: without the ``[semantic]`` extra (no numpy, no wordllama), and under
different hash seeds (the same input gives the same verdicts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)

# Runs the scenario pipeline and the Memory histories of the lineage tests through the real SDK, then
# attributes every failure with each offline engine, as given and with no evidence ids and no gold
# (the ranking and spectrum paths, where ties are most likely), and prints the verdicts as JSON.
_ATTRIBUTE = r"""
import dataclasses, json, random, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from memtrace_otel.attribution import FailureCase, create_engine
from memtrace_otel.attribution.ranking import embedder
from memtrace_otel.graph import build_graph, failed_evaluations
from memtrace_otel.spans.model import record_from_readable
from scenario import run_pipeline
from test_attribution_lineage import FACT, OTHER_TURNS, Memory

class SeededIds(IdGenerator):  # the same span ids in every process, so verdicts can be compared
    def __init__(self):
        self.rng = random.Random(7)
    def generate_span_id(self):
        return self.rng.getrandbits(64)
    def generate_trace_id(self):
        return self.rng.getrandbits(128)

def spans(history):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SeededIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    history(provider)
    return [record_from_readable(s) for s in exporter.get_finished_spans()]

def twins(provider):
    # Messages that say the same thing: every ranker ties on them.
    memory = Memory(provider)
    for dia_id in ("D1:1", "D2:1", "D3:1"):
        memory.chunk(dia_id, FACT)
    for dia_id, text in OTHER_TURNS.items():
        memory.chunk(dia_id, text)
    for case, keys in (("q1", ["D1:2"]), ("q2", ["D1:3", "D1:2"]), ("q3", ["D2:1"])):
        memory.ask(case, keys, "8 May 2023", evidence=())
    memory.ask("q4", ["D3:1"], "8 May 2023", evidence=("D3:1", "D1:1"))

def tied_keys(provider):
    # No gold: the fact is the evidence sentence, whose rarest words tie in weight; the memory is
    # searched by the heaviest ones, so which of the tied words are taken must not depend on the seed
    # (here it decided between a retrieval and an extraction error).
    memory = Memory(provider)
    a, b, c = "kayak zebra quartz", "violin harbor", "maple copper lantern falcon meadow pepper"
    memory.chunk("D0:1", "[7 May 2023] Caroline: misc")
    memory.update("D0:1", f"[8 May 2023] Caroline: violin {c}", "rewrite")
    memory.chunk("D1:1", f"[8 May 2023] Caroline: {a} {b} {c}", keep=False)
    memory.chunk("D9:1", f"[8 May 2023] Melanie: {b} {c}")
    memory.chunk("D10:1", f"[8 May 2023] Melanie: {c} zzz")
    memory.ask("q1", ["D9:1"], "no idea", gold="", question=f"What did Caroline say about {a} {b} {c}?",
               evidence=("D1:1",))

out = {}
for label, history in (("scenario", run_pipeline), ("twins", twins), ("tied", tied_keys)):
    G = build_graph(spans(history))
    for engine in ("lineage", "last-operation", "random-slice"):
        for evaluation in failed_evaluations(G):
            case = FailureCase.from_graph(G, evaluation)
            degraded = dataclasses.replace(case, evidence=[], gold=None)
            for signal, seen in (("gold", case), ("feedback", degraded)):
                a = create_engine(engine).attribute(G, seen)
                out[f"{label}/{engine}/{case.case_id}/{signal}"] = [
                    a.operation, a.error_type, a.confidence, a.explanation, a.evidence_path,
                    a.failure_reason, a.missing_traces]
out["embedder"] = embedder() is not None
out["numpy imported"] = sys.modules.get("numpy") is not None
print(json.dumps(out, sort_keys=True))
"""

_BLOCK_EXTRAS = "import sys; sys.modules['numpy'] = None; sys.modules['wordllama'] = None\n"


def attribute(*, seed: str = "0", prelude: str = "") -> dict[str, object]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.pathsep.join([TESTS, ROOT])}
    done = subprocess.run([sys.executable, "-c", prelude + _ATTRIBUTE], env=env, cwd=TESTS,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def test_a_plain_install_attributes_without_numpy_or_wordllama() -> None:
    verdicts = attribute(prelude=_BLOCK_EXTRAS)
    assert verdicts.pop("embedder") is False and verdicts.pop("numpy imported") is False
    assert verdicts["scenario/lineage/q1/gold"][1] == "UpdateError"
    # Without evidence ids the messages are ranked (BM25 + token overlap instead of embeddings).
    ranked = [v for k, v in verdicts.items() if k.startswith("twins/lineage/") and k.endswith("/feedback")]
    assert len(ranked) == 4 and all(v[0] is not None and v[5] is None for v in ranked)


@pytest.mark.parametrize("prelude", ["", _BLOCK_EXTRAS], ids=["installed extras", "plain install"])
def test_the_same_input_gives_the_same_verdicts_under_any_hash_seed(prelude: str) -> None:
    runs = [attribute(seed=seed, prelude=prelude) for seed in ("1", "2", "3")]
    assert len(runs[0]) > 20
    assert runs[0] == runs[1] == runs[2]
    assert runs[0]["tied/lineage/q1/gold"][1] == "RetrievalError"
