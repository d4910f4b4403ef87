"""Build the MemBase-vocabulary part: one annotated smartcomment graph per (system, conversation).

For each system and LoCoMo conversation: a clean simplified run (its questions
that pass are the candidates), then one fault per chosen question, each aimed at
one of its evidence turns, the questions' evidence kept disjoint so that one
fault cannot fail another's question. A fault is kept only if, in the run with
every kept fault, its question fails and the fault happened, and in the run
without that one fault its question passes: the label (the operation the fault
happened in, and the fault's type) is then the earliest single repair by
construction. The graph of the run with every kept fault is written, its failed
questions annotated the way MemTraceBench files are (``data.annotations``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from memtrace_bench.membase import evermemos, long_context, mem0, naive_rag
from memtrace_bench.membase.common import ERROR_TYPES, Fault, Outcome, distinctive, rank_key
from memtrace_bench.membase.data import Conversation, load
from memtrace_bench.membase.graph import Graph, NullGraph

__all__ = ["SYSTEMS", "MembaseConfig", "build_membase", "plan_faults", "verify_faults"]

SYSTEMS: dict[str, ModuleType] = {m.NAME: m for m in (mem0, evermemos, naive_rag, long_context)}
CONVERSATIONS = ("26", "30", "41", "42", "43", "47", "48", "49")
_MAX_ROUNDS = 5


@dataclass
class MembaseConfig:
    out: str
    seed: int = 0
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    conversations: list[str] = field(default_factory=lambda: list(CONVERSATIONS))
    per_type: int = 6
    locomo: str | None = None
    jobs: int | None = None  # worker processes [default: cores]


def _run(system: ModuleType, conversation: Conversation, faults: list[Fault], seed: str,
         graph: Graph | None = None) -> Outcome:
    graph = graph or NullGraph(seed=seed, project_id=system.NAME, user_id="")
    return system.run(graph, conversation, {f.site: f for f in faults}, seed)


def plan_faults(system: ModuleType, conversation: Conversation, clean: Outcome, seed: str,
                per_type: int) -> list[Fault]:
    """One fault per chosen question, types in turn, evidence and fault sites disjoint across questions."""
    passing = sorted((q for q in conversation.questions
                      if clean.passed.get(q.qid) and distinctive(conversation, q)),
                     key=lambda q: rank_key(seed, "question", q.qid))
    counts = dict.fromkeys(system.TYPES, 0)
    touched: set[str] = set()   # evidence of chosen questions and turns a fault happens in
    faults: list[Fault] = []
    for question in passing:
        if set(question.evidence) & touched:
            continue
        for error_type in sorted(system.TYPES, key=lambda t: (counts[t], system.TYPES.index(t))):
            if counts[error_type] >= per_type:
                continue
            target = min(question.evidence, key=lambda d: rank_key(seed, "target", question.qid, d))
            fault = system.plan(conversation, clean, error_type, question.qid, target,
                                touched | set(question.evidence), seed)
            if fault is None:
                continue
            faults.append(fault)
            counts[error_type] += 1
            touched |= set(question.evidence)
            if fault.site[0] not in ("retrieve", "respond"):
                touched.add(fault.site[1])
            break
    return faults


def verify_faults(system: ModuleType, conversation: Conversation, faults: list[Fault],
                  seed: str) -> list[Fault]:
    """The faults whose question fails with all of them and passes without that one alone (fixpoint)."""
    for _ in range(_MAX_ROUNDS):
        together = _run(system, conversation, faults, seed)
        kept = [f for f in faults if f in together.fired and not together.passed.get(f.question, True)]
        kept = [f for f in kept
                if _run(system, conversation, [g for g in faults if g != f], seed).passed.get(f.question)]
        if kept == faults:
            return faults
        faults = kept
    return []


def _annotations(conversation: Conversation, outcome: Outcome, faults: list[Fault]) -> list[dict[str, Any]]:
    questions = {q.qid: q for q in conversation.questions}
    notes = []
    for fault in sorted(faults, key=lambda f: int(f.question.rsplit("-", 1)[1])):
        question = questions[fault.question]
        notes.append({"query_id": question.qid, "query": question.question,
                      "golden_answers": [question.answer],
                      "prediction": outcome.predictions[question.qid],
                      "source_evidence_ids": [conversation.message_id(d) for d in question.evidence],
                      "final_error_type": fault.error_type, "final_op_id": outcome.fired[fault]})
    return notes


def build_one(system: ModuleType, conversation: Conversation, seed: str, per_type: int) -> dict[str, Any]:
    """The exported, annotated graph of one system on one conversation."""
    clean = _run(system, conversation, [], seed)
    planned = plan_faults(system, conversation, clean, seed, per_type)
    faults = verify_faults(system, conversation, planned, seed)
    graph = Graph(seed=seed, project_id=system.NAME, user_id=f"locomo-{conversation.sample}",
                  metadata={"layer_type": system.NAME, "dataset_cls": "LoCoMo",
                            "generator": "memtrace_bench.membase", "seed": seed})
    outcome = _run(system, conversation, faults, seed, graph)
    for fault in faults:  # the written run is the verified one
        if outcome.passed.get(fault.question) or fault not in outcome.fired:
            raise AssertionError(f"{system.NAME}/{conversation.conversation_id}: fault {fault} did not "
                                 "reproduce")
    graph.annotations = _annotations(conversation, outcome, faults)
    return graph.export()


def _job(job: tuple[str, Conversation, str, int, str]) -> tuple[str, list[str]]:
    """Build and write one graph (in a worker process); its file name and its labels' error types."""
    name, conversation, seed, per_type, out = job
    document = build_one(SYSTEMS[name], conversation, seed, per_type)
    filename = f"{name}-{conversation.conversation_id}.json"
    with open(os.path.join(out, filename), "w", encoding="utf-8") as handle:
        json.dump(document, handle, ensure_ascii=False)
    return filename, [note["final_error_type"] for note in document["data"]["annotations"]]


def build_membase(config: MembaseConfig,
                  progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Write one graph per (system, conversation) and ``manifest.txt`` into ``config.out``.

    The manifest is JSON named ``.txt``: a ``.json`` file in the directory would be read as a graph.
    """
    unknown = [s for s in config.systems if s not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown MemBase system {unknown[0]!r} (known: {', '.join(SYSTEMS)})")
    started = time.perf_counter()
    # every conversation is read before any work: a bad data directory is one line, not a worker's traceback
    jobs = [(name, load(c, SYSTEMS[name].MAX_SESSIONS, config.locomo), f"{config.seed}/{name}/{c}",
             config.per_type, config.out) for name in config.systems for c in config.conversations]
    os.makedirs(config.out, exist_ok=True)
    done: dict[int, tuple[str, list[str]]] = {}
    workers = max(1, min(config.jobs or os.cpu_count() or 1, len(jobs)))
    if workers == 1:
        for index, job in enumerate(jobs):
            done[index] = _job(job)
            if progress:
                progress(done[index][0].removesuffix(".json"), len(done), len(jobs))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(_job, job): index for index, job in enumerate(jobs)}
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                if progress:
                    progress(done[futures[future]][0].removesuffix(".json"), len(done), len(jobs))
    cases: dict[str, dict[str, int]] = {}
    files = []
    for index, (name, *_rest) in enumerate(jobs):  # in job order, whatever order they finished in
        filename, types = done[index]
        files.append(filename)
        counts = cases.setdefault(name, dict.fromkeys(SYSTEMS[name].TYPES, 0))
        for error_type in types:
            counts[error_type] += 1
    manifest = {"part": "membase", "seed": config.seed, "files": files,
                "labelled_cases": sum(sum(c.values()) for c in cases.values()),
                "cases": cases,
                "by_error_type": {t: sum(c.get(t, 0) for c in cases.values()) for t in ERROR_TYPES},
                "applicable": {name: list(SYSTEMS[name].TYPES) for name in config.systems},
                "conversations": config.conversations, "per_type": config.per_type,
                "seconds": round(time.perf_counter() - started, 1)}
    with open(os.path.join(config.out, "manifest.txt"), "w", encoding="utf-8") as handle:
        json.dump({k: v for k, v in manifest.items() if k != "seconds"}, handle, indent=1)
    return manifest
