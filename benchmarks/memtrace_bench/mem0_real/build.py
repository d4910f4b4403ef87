"""Build the real-mem0 part: run the app in a mem0 venv, then label each failure by counterfactual replay.

Per conversation:

1. **The run.** The driver (``driver.py``, with the mem0 venv's python) ingests the conversation and
   asks its questions; spans go to ``spans/mem0-real-v<N>/<conversation>.jsonl`` in the build
   directory, and a copy of mem0's store is kept before each session.
2. **Candidates** of a failed question, in the order they happened: the seeded-faulty calls of
   ingestion whose damage touches what the reader answers from (:func:`damages`: an extraction
   that lost or changed a fact, a decision whose wrong target held a memory, holding a key fact's
   sentence or answering for a key fact or stating the gold), then the question's own search per
   speaker, then its answer call. A fault elsewhere could matter only through a cascade; it is not
   tried.
3. **Replays**, one call repaired at a time (answered by its oracle): an ingestion call re-runs
   ingestion from the copy of the store made before its session, then asks every failed question
   it is a candidate of; a search (oracle: what it returned after the speaker's live memories
   holding a key fact) or answer call re-asks on the final store.
4. **Labels**: the earliest candidate whose repair makes the answer pass; the operation is the span
   the instrumentor emitted for the call's effect (``mem0.add.extract``; the ``mem0.update`` /
   ``mem0.delete`` of a wrong target; the question's ``mem0.search``; ``app.answer``). Failures no
   single repair fixes are counted (``not-single-cause``), as are questions no fault-free run can
   answer (an evidence turn without a LoCoMo observation: ``unanswerable``). Each label lists the
   other single repairs that pass (``also_passing``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtrace_bench.config import locomo_dir
from memtrace_bench.locomo import QA
from memtrace_bench.mem0_real.world import World

__all__ = ["BuildOptions", "also_passing", "build", "damages", "default_mem0_python", "error_type_of"]

Progress = Callable[[str], None]


def default_mem0_python(version: str = "1.0.11") -> str:
    """Where ``.ci/install-mem0-venvs.sh`` builds the venv of mem0ai ``version``."""
    root = os.environ.get("MEMTRACE_MEM0_VENVS", str(Path.home() / ".cache" / "memtrace" / "venvs"))
    return str(Path(root) / f"mem0ai-{version}" / "bin" / "python")


@dataclass
class BuildOptions:
    out: str
    mem0_python: str
    conversations: list[str]
    seed: int = 0
    max_sessions: int | None = None
    jobs: int = 2
    locomo: str | None = None
    keep_work: bool = False
    top_k: int = 10
    """Memories per speaker's search (mem0's LoCoMo evaluation's ``MemorySearch`` default)."""
    progress: Progress = field(default=lambda line: None)


def error_type_of(call: dict[str, Any]) -> str:
    """The error type of a repaired call: what it did to the information.

    >>> error_type_of({"kind": "decide", "fault": "wrong DELETE 2"})
    'DeletionError'
    """
    kind, fault = call.get("kind"), str(call.get("fault") or "")
    if kind == "extract":
        return "ExtractionError"
    if kind == "decide":
        return "DeletionError" if "DELETE" in fault else "UpdateError"
    if kind == "search":
        return "RetrievalError"
    return "ResponseError"


def damages(world: World, qa: QA, call: dict[str, Any]) -> bool:
    """Whether a seeded-faulty ingestion call damaged what the reader of ``qa`` answers from: a
    memory it lost (an extraction's oracle fact, a wrong decision's target as it was) that the
    reader would answer from (:meth:`World.relevant`: it answers for a key fact or states the
    gold), read as the reader reads it, besides one holding a key fact's sentence whole.

    The label is the earliest single repair that passes; holding the sentence whole missed losses
    the reader needed: a merged memory whose copy of the key fact had another date but whose other
    sentence said it, or a memory stating the gold that was not the key fact's turn. An extraction
    whose written facts still answer for what it lost (a lossy fact that kept the words asked; an
    observation that kept what the question needs of the fuller fact) damaged nothing of ``qa``.
    """
    keys = world.key_facts(qa)
    lost = [text for text in call.get("lost", []) if text]
    returned = (call.get("returned") or []) if call.get("kind") == "extract" else []
    wrote = [t for t in returned if isinstance(t, str)]

    def still_said(text: str) -> bool:
        # What the extraction wrote answers for every key fact the lost fact did (or states the
        # gold as it did): the question lost nothing here, and a repair that passes does so only
        # through a cascade of later decisions (a fuller fact that a later wrong DELETE misses).
        answered = [(d, key) for d, key in keys
                    if world.holds(text, d, key) or world.answers(qa, d, key, text)]
        if answered:
            return all(any(world.answers(qa, d, key, w) for w in wrote) for d, key in answered)
        return any(world.states(qa, w) for w in wrote)

    return any((any(world.holds(text, d, key) for d, key in keys) or world.relevant(qa, text))
               and not still_said(text) for text in lost)


def also_passing(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The other single repairs that also make the answer pass, later than the label's (the label
    is the earliest: the paper's rule): each one's call, fault, error type and span. When both
    speakers' searches' repairs pass, the second search is one of them; `memtrace bench score`
    reports how often an engine names any of them, as a diagnostic beside the strict accuracy.

    >>> [(o["call_id"], o["error_type"], o["span_id"]) for o in also_passing([{"call_id": "q3/search/Jon",
    ...     "kind": "search", "fault": None, "span": {"span_id": "ab", "name": "mem0.search"}}])]
    [('q3/search/Jon', 'RetrievalError', 'ab')]
    """
    return [{"call_id": c["call_id"], "error_type": error_type_of(c), "fault": c.get("fault"),
             "name": (c.get("span") or {}).get("name"), "span_id": (c.get("span") or {}).get("span_id")}
            for c in calls if (c.get("span") or {}).get("span_id")]


def _order(call_id: str) -> tuple[int, int, int]:
    match = re.match(r"D(\d+):(\d+)/(\w+)", call_id)
    if not match:
        return (10**6, 0, 0)
    return (int(match.group(1)), int(match.group(2)), 0 if match.group(3) == "extract" else 1)


class DriverError(RuntimeError):
    pass


def _run_driver(options: BuildOptions, conversation: str, arguments: list[str]) -> dict[str, Any]:
    result = arguments[arguments.index("--result") + 1]
    command = [options.mem0_python, "-m", "memtrace_bench.mem0_real.driver", "--conversation",
               conversation, "--seed", str(options.seed), *arguments]
    if options.locomo:
        command += ["--locomo", options.locomo]
    if options.max_sessions is not None:
        command += ["--max-sessions", str(options.max_sessions)]
    command += ["--top-k", str(options.top_k)]
    env = {**os.environ, "MEM0_TELEMETRY": "False", "PYTHONDONTWRITEBYTECODE": "1",
           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise DriverError(f"the mem0 app failed on conversation {conversation}: {tail[0]}")
    with open(result, encoding="utf-8") as handle:
        return json.load(handle)


def build(options: BuildOptions) -> dict[str, Any]:
    """Build the part into ``options.out``: span files, ``labels.jsonl``, ``mem0_real_failures.jsonl``,
    ``manifest.json``. Returns the manifest."""
    started = time.monotonic()
    directory = options.locomo or locomo_dir()
    for conversation in options.conversations:
        if not os.path.isfile(os.path.join(directory, f"{conversation}.json")):
            raise FileNotFoundError(f"LoCoMo conversation {conversation} not found in {directory}")
    os.makedirs(options.out, exist_ok=True)
    labels: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    tally: Counter[str] = Counter()
    generation = None
    for conversation in options.conversations:
        conv_labels, conv_failures, conv_tally, generation = _conversation(options, conversation)
        labels += conv_labels
        failures += conv_failures
        tally.update(conv_tally)
    _write_jsonl(os.path.join(options.out, "labels.jsonl"), labels)
    _write_jsonl(os.path.join(options.out, "mem0_real_failures.jsonl"), failures)
    manifest = {
        "part": f"mem0-real-v{generation}", "seed": options.seed, "conversations": options.conversations,
        "max_sessions": options.max_sessions, "top_k": options.top_k, "labels": len(labels),
        "by_error_type": dict(sorted(Counter(label["error_type"] for label in labels).items())),
        "failures": dict(sorted(tally.items())), "seconds": round(time.monotonic() - started, 1),
    }
    with open(os.path.join(options.out, "manifest.json"), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return manifest


Rows = list[dict[str, Any]]


def _conversation(options: BuildOptions, conversation: str) -> tuple[Rows, Rows, Counter[str], int]:
    world = World.load(conversation, seed=options.seed, directory=options.locomo,
                       max_sessions=options.max_sessions)
    work = tempfile.mkdtemp(prefix=f"mem0-real-{conversation}-")
    try:
        return _label(options, world, conversation, work)
    finally:
        if not options.keep_work:
            shutil.rmtree(work, ignore_errors=True)


def _label(options: BuildOptions, world: World, conversation: str,
           work: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Counter[str], int]:
    say = options.progress
    say(f"conversation {conversation}: the run (ingestion and {len(world.questions())} questions)")
    part_dir = None
    data, snapshots = os.path.join(work, "data"), os.path.join(work, "snap")
    probe = os.path.join(work, "run.json")
    relative = os.path.join("spans", "pending", f"{conversation}.jsonl")
    os.makedirs(os.path.join(options.out, "spans", "pending"), exist_ok=True)
    spans_path = os.path.join(options.out, relative)
    if os.path.exists(spans_path):
        os.remove(spans_path)
    run = _run_driver(options, conversation, ["--data", data, "--snapshots", snapshots, "--result", probe,
                                              "--spans", spans_path])
    generation = int(run["generation"])
    part = f"mem0-real-v{generation}"
    part_dir = os.path.join(options.out, "spans", part)
    os.makedirs(part_dir, exist_ok=True)
    final_relative = os.path.join("spans", part, f"{conversation}.jsonl")
    os.replace(spans_path, os.path.join(options.out, final_relative))
    shutil.rmtree(os.path.join(options.out, "spans", "pending"), ignore_errors=True)

    by_index = {qa.index: qa for qa in world.questions()}
    answers = {a["question"]: a for a in run["answers"]}
    tally: Counter[str] = Counter(questions=len(answers))
    failed = []
    for index in sorted(answers):
        if answers[index]["passed"]:
            continue
        tally["failed"] += 1
        if not world.answerable(by_index[index]):
            tally["unanswerable"] += 1
        else:
            failed.append(index)
    calls = sorted((c for c in run["calls"] if c.get("span")), key=lambda c: _order(c["call_id"]))
    candidates: dict[int, list[dict[str, Any]]] = {}
    for index in failed:
        ingestion = [c for c in calls if damages(world, by_index[index], c)]
        spans = answers[index]["spans"]
        query = [{"call_id": f"q{index}/search/{speaker}", "kind": "search", "fault": None,
                  "span": spans["search"].get(speaker)} for speaker in world.conversation.speakers]
        answer = [{"call_id": f"q{index}/answer", "kind": "answer",
                   "fault": run["answer_faults"].get(f"q{index}/answer"), "span": spans["answer"]}]
        candidates[index] = ingestion + query + answer

    outcomes = _replays(options, world, conversation, work, data, snapshots, failed, candidates, calls)
    labels, rows = [], []
    for index in failed:
        qa, tried = by_index[index], candidates[index]
        passing = [c for c in tried if outcomes.get((c["call_id"], index))]
        earliest = passing[0] if passing else None
        status = "single-cause" if earliest else "not-single-cause"
        tally[status] += 1
        row = {"case_id": world.case_id(qa), "system": f"mem0ai-{generation}", "conversation": conversation,
               "question": qa.question, "gold": str(qa.answer), "prediction": answers[index]["prediction"],
               "evidence": list(qa.evidence), "category": qa.category, "gold_stated": world.stated(qa),
               "spans": [final_relative], "seed": options.seed, "part": part,
               "repair": {"status": status, "tried": [c["call_id"] for c in tried],
                          "faults": [c.get("fault") for c in tried],
                          "passing": [c["call_id"] for c in passing]}}
        rows.append(row)
        if earliest is not None:
            span = earliest["span"] or {}
            labels.append({**{k: v for k, v in row.items() if k != "repair"},
                           "error_type": error_type_of(earliest),
                           "operation": {"trace_id": span.get("trace_id"), "span_id": span.get("span_id"),
                                         "name": span.get("name")},
                           "repair": {"target": earliest["call_id"], "fault": earliest.get("fault"),
                                      "tried": len(tried)},
                           "also_passing": also_passing(passing[1:])})
            tally[labels[-1]["error_type"]] += 1
    say(f"conversation {conversation}: {len(labels)} labels from {len(failed)} answerable failures")
    return labels, rows, tally, generation


def _replays(options: BuildOptions, world: World, conversation: str, work: str, data: str, snapshots: str,
             failed: list[int], candidates: dict[int, list[dict[str, Any]]],
             calls: list[dict[str, Any]]) -> dict[tuple[str, int], bool]:
    """Whether each (repaired call, question) passes: one driver per repaired ingestion call, one for
    every search and answer repair on the final store."""
    jobs: list[tuple[str, list[str]]] = []
    last = max((s.index for s in world.conversation.sessions), default=0)
    trials = [[index, [c["call_id"]]] for index in failed for c in candidates[index]
              if c["kind"] in ("search", "answer")]
    if trials:
        trial_file = os.path.join(work, "trials.json")
        with open(trial_file, "w", encoding="utf-8") as handle:
            json.dump(trials, handle)
        jobs.append(("final", ["--from-session", str(last + 1), "--trials", trial_file]))
    by_call: dict[str, list[int]] = {}
    for index in failed:
        for c in candidates[index]:
            if c["kind"] in ("extract", "decide"):
                by_call.setdefault(c["call_id"], []).append(index)
    session_of = {c["call_id"]: c["session"] for c in calls}
    for call_id in sorted(by_call, key=_order):
        questions = ",".join(str(q) for q in sorted(set(by_call[call_id])))
        jobs.append((call_id, ["--from-session", str(session_of[call_id]), "--repair", call_id,
                               "--questions", questions]))
    options.progress(f"conversation {conversation}: {len(jobs)} replays "
                     f"({len(by_call)} repaired ingestion calls)")

    def one(number: int, job: tuple[str, list[str]]) -> dict[str, Any]:
        name, arguments = job
        replay_dir = os.path.join(work, f"replay{number}")
        replay_data = os.path.join(replay_dir, "data")
        session = int(arguments[arguments.index("--from-session") + 1])
        source = data if name == "final" else os.path.join(snapshots, f"s{session}")
        shutil.copytree(source, replay_data)
        try:
            return _run_driver(options, conversation, ["--data", replay_data, "--result",
                                                       os.path.join(replay_dir, "result.json"), *arguments])
        finally:
            shutil.rmtree(replay_dir, ignore_errors=True)

    outcomes: dict[tuple[str, int], bool] = {}
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = [pool.submit(one, number, job) for number, job in enumerate(jobs)]
        for number, (job, future) in enumerate(zip(jobs, futures, strict=True), 1):
            result = future.result()
            for answer in result["answers"]:
                repaired = answer["repairs"][0] if answer["repairs"] else job[0]
                outcomes[(repaired, answer["question"])] = bool(answer["passed"])
            if number % 10 == 0 or number == len(jobs):
                options.progress(f"conversation {conversation}: replay {number}/{len(jobs)}")
    return outcomes


def _write_jsonl(path: str, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - the CLI is `memtrace bench mem0`
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--mem0-python", default=default_mem0_python())
    parser.add_argument("--conversation", action="append", default=None)
    parser.add_argument("--max-sessions", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args(argv)
    manifest = build(BuildOptions(args.out, args.mem0_python, args.conversation or ["26"], args.seed,
                                  args.max_sessions, args.jobs, top_k=args.top_k,
                                  progress=lambda line: print(line, file=sys.stderr)))
    print(json.dumps(manifest, indent=2))
    return 0
