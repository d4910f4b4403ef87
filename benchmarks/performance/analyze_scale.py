"""``memtrace analyze`` at scale: graph build + lineage attribution of N-span pipelines of many users.

Generates, per size, an OTLP/JSON Lines file of a Mem0-shaped memory service
with many independent users (conversations), as production would send it:

* one ingestion trace per chat session (a session root span; per message:
  ingest -> extract facts -> add a memory unit, or update the user's unit of
  the same topic);
* one trace per question (search the user's memory, linking to the ingestion
  traces that wrote the records it read -> answer -> judge against the gold);
* failed evaluations = ``--failed`` of all spans (default 1%), one injected
  fault each, round-robin over the five error types (an extraction that
  drops the date, an update that overwrites the fact, a deletion, a search
  that misses the unit, an answer that ignores the context).

With ``--no-evidence`` the evaluations name no evidence ids (a judge or a
user's correction rarely does), so the engine ranks the user's messages to
find them.

Then, for each size in a fresh process (CPU time, one core): read the file,
``build_graph``, ``attribute_failures(G, "lineage")``. Prints a table with
spans/s and how many verdicts name the injected error type (a check that the
engine did its real work, not a target).

``--workload repeated``: a long-running app that reuses its variable names instead (issue 24).
``examples/offline_memory_agent.py`` (three chat sessions, seven questions, some answered wrong) is
run again and again in one process with one :class:`MemoryTracer`, a new user each run: every run
writes ``msg:D1:1``, ``facts:D1:1``, ``query:q1`` ... again, so each name gets one version per run
and version chains are as long as the run count, across thousands of traces (the input that was
quadratic: 10k spans 17 s, 20k 98 s). ``--shared-records``: the users' records are named alike too
(one unit rewritten by every run). Its table counts the verdicts' error types (every run fails the
same questions, so the counts scale with the runs) and the longest version chain.

Target: 200k spans with 1% failed evaluations analysed (build + attribution) in
<= 60 s on one core, time linear in spans (the repeated workload: the same 60 s).

    python benchmarks/performance/analyze_scale.py [--spans 10000 20000 50000 100000 200000] [--dir DIR]
                                       [--failed 0.01] [--no-evidence] [--json]
    python benchmarks/performance/analyze_scale.py --workload repeated [--shared-records] [--spans ...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.semconv import ErrorType
from memtrace_otel.spans import read_span_files

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import offline_memory_agent as example  # the example is a script, not a package

_NAMES = ["Ava", "Ben", "Caroline", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jon", "Kemi", "Lars"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]
_ACTIVITIES = [  # (what the message says, what the question asks, topic of the memory unit)
    ("went to the {x} support group", "go to the {x} support group", "group"),
    ("adopted a puppy called {X}", "adopt the puppy called {X}", "pet"),
    ("started learning the {x}", "start learning the {x}", "hobby"),
    ("ran the {X} marathon", "run the {X} marathon", "sport"),
    ("painted a {x} at sunrise", "paint the {x}", "art"),
    ("moved to {X}", "move to {X}", "home"),
    ("visited the {x} museum", "visit the {x} museum", "trip"),
    ("signed up for a {x} course", "sign up for the {x} course", "study"),
]
_WORDS = ["cello", "lake", "pottery", "Boston", "Lisbon", "harbour", "science", "violin", "Porto",
          "garden", "history", "Berlin", "lighthouse", "salsa", "Kyoto", "forest", "chess", "Oslo"]
_FILLER = ["The weather was lovely today.", "I had a long day at work.", "We should catch up soon!",
           "That sounds great, tell me more.", "I am so tired this week.", "Thanks for asking!"]
_FAULTS = list(ErrorType)  # extraction, update, deletion, retrieval, response
_MESSAGES_PER_SESSION = 10
_FACTS_PER_USER = 24
_FILLER_PER_USER = 36
_QUESTIONS_PER_USER = 16
_TOP_K = 3


@dataclass
class Fact:
    dia_id: str
    text: str
    question: str
    gold: str
    topic: str
    fault: ErrorType | None = None


@dataclass
class User:
    """One conversation: its messages, the facts asked about, and its memory (records by key)."""

    number: int
    speaker: str
    messages: list[tuple[str, str, Fact | None]] = field(default_factory=list)
    questions: list[Fact] = field(default_factory=list)
    records: dict[str, tuple[str, dict[str, object]]] = field(default_factory=dict)


def _date(rng: random.Random, year: int) -> str:
    return f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} {year}"


def _user(number: int, rng: random.Random) -> User:
    speaker = _NAMES[number % len(_NAMES)]
    user = User(number, speaker)
    lines: list[tuple[str, Fact | None]] = []
    for i in range(_FACTS_PER_USER):
        said, asked, topic = _ACTIVITIES[i % len(_ACTIVITIES)]
        word = rng.choice(_WORDS)
        said, asked = (s.format(x=word.lower(), X=word.capitalize()) for s in (said, asked))
        when = _date(rng, rng.choice((2022, 2023)))
        fact = Fact("", f"I {said} on {when}.", f"When did {speaker} {asked}?", when, f"{topic}{i}")
        lines.append((fact.text, fact))
    lines += [(rng.choice(_FILLER), None) for _ in range(_FILLER_PER_USER)]
    rng.shuffle(lines)
    for index, (text, fact) in enumerate(lines):
        session, turn = divmod(index, _MESSAGES_PER_SESSION)
        dia_id = f"U{number}:D{session + 1}:{turn + 1}"
        header = f"[{_date(rng, 2023)}] {speaker}: "
        if fact is not None:
            fact.dia_id = dia_id
        user.messages.append((dia_id, header + text, fact))
    facts = [f for _, _, f in user.messages if f is not None]
    user.questions = rng.sample(facts, _QUESTIONS_PER_USER)
    return user


def _spans_per_user(user: User) -> int:
    sessions = -(-len(user.messages) // _MESSAGES_PER_SESSION)
    # session root + (ingest, extract, add) per message; question root + (search, answer, judge).
    return sessions + 3 * len(user.messages) + 4 * len(user.questions) + 2  # + the maintenance trace


class _Service:
    """The instrumented memory service of all users (one exporter; one variable registry per user)."""

    def __init__(self, path: str, *, evidence: bool = True) -> None:
        self.evidence = evidence
        self.provider = TracerProvider()
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPJsonLinesSpanExporter(path), max_queue_size=1 << 16, max_export_batch_size=2048))
        self.app = self.provider.get_tracer("analyze-scale")
        self.mt = self.for_user()

    def for_user(self) -> MemoryTracer:
        # One registry per user, as one worker per conversation would have: a registry that
        # forgot old names (bounded) might start a new name at a later version.
        return MemoryTracer(self.provider, capture_content=True, keep_content_in_process=0)

    def ingest(self, user: User) -> None:
        for start in range(0, len(user.messages), _MESSAGES_PER_SESSION):
            with self.app.start_as_current_span(f"session {user.number}"):
                for dia_id, text, fact in user.messages[start : start + _MESSAGES_PER_SESSION]:
                    self._message(user, dia_id, text, fact)

    def _message(self, user: User, dia_id: str, text: str, fact: Fact | None) -> None:
        store = f"user-{user.number}"
        with self.mt.operation("ingest", Category.INGEST, store_id=store) as op:
            message = op.write(f"msg:{dia_id}", text, kind=VariableKind.MESSAGE)
        with self.mt.operation("extract", Category.EXTRACTION, store_id=store) as op:
            op.read(message)
            said = text.split(": ", 1)[1].replace("I ", f"{user.speaker} ", 1)
            if fact is not None and fact.fault is ErrorType.EXTRACTION:
                said = said.split(" on ")[0] + "."  # the extractor drops the date
            facts = op.write(f"facts:{dia_id}", said, kind=VariableKind.FACTS)
        key = fact.topic if fact is not None else f"chat{len(user.records) % 4}"
        old = user.records.get(key)
        with self.mt.operation("store", Category.UPDATE if old else Category.EXTRACTION,
                               gen_ai_operation="update_memory" if old else "create_memory",
                               store_id=store) as op:
            op.read(facts)
            if old is None:
                unit = op.write(f"mem:{user.number}:{key}", said, kind=VariableKind.MEMORY_UNIT)
            else:
                unit = op.update(op.read_record(old[1], content=old[0]), said)
            user.records[key] = (said, op.lineage_metadata(unit))

    def maintain(self, user: User) -> None:
        """One maintenance trace: the injected update and deletion faults."""
        store = f"user-{user.number}"
        with self.app.start_as_current_span(f"maintenance {user.number}"):
            for fact in user.questions:
                if fact.fault not in (ErrorType.UPDATE, ErrorType.DELETION):
                    continue
                text, metadata = user.records[fact.topic]
                deleting = fact.fault is ErrorType.DELETION
                with self.mt.operation("forget" if deleting else "consolidate",
                                       Category.DELETION if deleting else Category.UPDATE,
                                       gen_ai_operation="delete_memory" if deleting else "update_memory",
                                       store_id=store) as op:
                    unit = op.read_record(metadata, content=text)
                    if deleting:
                        unit = op.delete(unit)
                        user.records[fact.topic] = ("", op.lineage_metadata(unit))
                    else:
                        new = f"{user.speaker} likes {fact.topic.rstrip('0123456789')} a lot."
                        unit = op.update(unit, new)
                        user.records[fact.topic] = (new, op.lineage_metadata(unit))

    def ask(self, user: User, number: int, fact: Fact) -> None:
        store, case = f"user-{user.number}", f"u{user.number}/q{number}/{fact.fault or 'pass'}"
        with self.app.start_as_current_span(f"question {case}"):
            with self.mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                                   store_id=store) as op:
                query = op.write(f"query:{case}", fact.question, kind=VariableKind.QUERY)
                others = [k for k in sorted(user.records) if k != fact.topic and user.records[k][0]]
                keys = others[number % max(len(others) - _TOP_K, 1):][: _TOP_K - 1]
                if fact.fault is not ErrorType.RETRIEVAL:
                    keys.insert(0, fact.topic)
                keys = [k for k in keys if user.records[k][0]]  # a deleted record is not found
                texts = [user.records[k][0] for k in keys]
                for key in keys:
                    op.read_record(user.records[key][1], content=user.records[key][0])
                context = op.write(f"context:{case}", "\n".join(texts), kind=VariableKind.CONTEXT)
            with self.mt.operation("answer", Category.GENERATION) as op:
                op.read(query)
                op.read(context)
                right = fact.gold in context.content and fact.fault is not ErrorType.RESPONSE
                prediction = fact.gold if right else "I don't know"
                answer = op.write(f"answer:{case}", prediction, kind=VariableKind.ANSWER)
            with self.mt.operation("judge", Category.EVALUATION) as op:
                op.read(answer)
                op.record_evaluation(right, score=float(right), question=fact.question, prediction=prediction,
                                     gold=fact.gold, evidence=[fact.dia_id] if self.evidence else [],
                                     answer=answer, case_id=case)


def generate(path: str, spans: int, *, failed: float = 0.01, evidence: bool = True, seed: int = 0) -> int:
    """Write about ``spans`` spans to ``path``; returns the number of injected failures."""
    rng = random.Random(seed)
    users = []
    while sum(_spans_per_user(u) for u in users) < spans:
        users.append(_user(len(users), rng))
    faulty = [(u, f) for u in users for f in u.questions]
    rng.shuffle(faulty)
    wanted = max(1, round(failed * spans))
    for number, (_, fact) in enumerate(faulty[:wanted]):
        fact.fault = _FAULTS[number % len(_FAULTS)]
    service = _Service(path, evidence=evidence)
    for user in users:
        service.mt = service.for_user()
        service.ingest(user)
        service.maintain(user)
        for number, fact in enumerate(user.questions):
            service.ask(user, number, fact)
    service.provider.shutdown()
    return wanted


class _UserMemory(example.TinyMemory):
    """The example's memory for one user of many: the store names its records per user (a real store
    gives each new record an id of its own), everything else keeps the example's names."""

    def __init__(self, tracer: MemoryTracer, app_tracer: Any, user: int) -> None:
        super().__init__(tracer, app_tracer)
        self.user = user

    def record_id(self, topic: str) -> str:
        return f"mem:{self.user}:{topic}"


def generate_repeated(path: str, runs: int, *, shared_records: bool = False) -> None:
    """Run the example ``runs`` times in one process, one tracer, spans to ``path``.

    ``shared_records``: every run's store names its records as the example does (``mem:moved``),
    so memory units, too, get one version per run: version chains of stored memory across every
    conversation, which the engine follows as lineage (an update rewrites the unit).
    """
    provider = TracerProvider(resource=Resource.create({"service.name": "offline-memory-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(path), max_queue_size=1 << 16))
    tracer = MemoryTracer(provider, capture_content=True)
    app_tracer = provider.get_tracer("offline-memory-agent")
    with contextlib.redirect_stdout(io.StringIO()):  # the example's own prints
        for run in range(runs):
            # a new user: the same message, query, context and answer names, records of its own
            memory = (example.TinyMemory(tracer, app_tracer) if shared_records
                      else _UserMemory(tracer, app_tracer, run))
            for number, session in enumerate(example.SESSIONS, start=1):
                with app_tracer.start_as_current_span(f"session {number}"):
                    for dia_id, text in session:
                        memory.ingest(dia_id, text)
            for case_id, question, gold, evidence in example.QUESTIONS:
                memory.answer(case_id, question, gold, evidence)
    provider.shutdown()


def _spans_per_run() -> int:
    """Spans (memory operations and application spans) one run of the example exports."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "one.jsonl")
        generate_repeated(path, 1)
        return len(read_span_files([path]).spans)


_ANALYZE = """
import collections, json, sys, time
from memtrace_otel.attribution.runner import attribute_failures
from memtrace_otel.graph import build_graph
from memtrace_otel.spans import read_span_files
start = time.process_time()
result = read_span_files([sys.argv[1]])
read = time.process_time()
graph = build_graph(result.spans)
built = time.process_time()
attributions = attribute_failures(graph, "lineage")
done = time.process_time()
expected = [a.case.case_id.rsplit("/", 1)[-1] for a in attributions]  # users: the injected type
found = [a.error_type.value if a.error_type else None for a in attributions]
types = collections.Counter(t or "none" for t in found)
print(json.dumps({
    "spans": len(result.spans), "failures": len(attributions), "read_seconds": read - start,
    "build_seconds": built - read, "attribute_seconds": done - built,
    "type_matches": sum(e == f for e, f in zip(expected, found)),
    "unattributed": sum(a.operation is None for a in attributions), "types": dict(sorted(types.items())),
    "longest_chain": max((len(v) for v in __import__("memtrace_otel.graph.index", fromlist=["x"])
                          .variables_by_name(graph).values()), default=0),
    # VmHWM, this process's own high-water mark: ru_maxrss starts from the parent's at fork.
    "peak_rss_mib": next(int(line.split()[1]) for line in open("/proc/self/status")
                         if line.startswith("VmHWM:")) / 1024,
}))
"""


def measure(path: str) -> dict[str, Any]:
    """Read + build + attribute ``path`` in a fresh process; CPU seconds of each phase."""
    out = subprocess.run([sys.executable, "-c", _ANALYZE, path], check=True, capture_output=True, text=True)
    row = json.loads(out.stdout)
    row["analyze_seconds"] = row["build_seconds"] + row["attribute_seconds"]
    row["spans_per_second"] = row["spans"] / max(row["analyze_seconds"], 1e-9)
    return row


def _file(directory: str, spans: int, args: argparse.Namespace, per_run: int) -> str:
    """The span file of one size of the chosen workload, generated unless ``directory`` has it."""
    if args.workload == "repeated":
        runs = max(1, round(spans / per_run))
        shared = "-shared" if args.shared_records else ""
        path = os.path.join(directory, f"analyze-repeated-{runs}{shared}.jsonl")
        if not os.path.exists(path):
            generate_repeated(path, runs, shared_records=args.shared_records)
        return path
    name = f"analyze-scale-{spans}-{args.failed:g}{'' if args.evidence else '-no-evidence'}.jsonl"
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        generate(path, spans, failed=args.failed, evidence=args.evidence)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, nargs="+", default=[10_000, 20_000, 50_000, 100_000, 200_000])
    parser.add_argument("--failed", type=float, default=0.01, help="failed evaluations per span")
    parser.add_argument("--no-evidence", dest="evidence", action="store_false",
                        help="evaluations name no evidence ids (the engine ranks messages)")
    parser.add_argument("--workload", choices=("users", "repeated"), default="users",
                        help="many users (default), or the example run again and again (names reused)")
    parser.add_argument("--shared-records", action="store_true",
                        help="repeated: memory records named alike in every run too (one unit rewritten)")
    parser.add_argument("--dir", help="keep (and reuse) the generated span files here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    per_run = _spans_per_run() if args.workload == "repeated" else 0
    show = _print_repeated if args.workload == "repeated" else _print_row
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.dir or scratch
        os.makedirs(directory, exist_ok=True)
        rows = []
        for spans in args.spans:
            rows.append(measure(_file(directory, spans, args, per_run)))
            if not args.json:
                show(rows[-1], first=len(rows) == 1)
    if args.json:
        print(json.dumps(rows, indent=2))


def _print_repeated(row: dict[str, Any], *, first: bool) -> None:
    if first:
        print("CPU seconds of a fresh process, one core; analyze = build_graph + attribute_failures")
        print(f"{'spans':>8} {'failures':>8} {'chain':>6} {'read':>7} {'build':>7} {'attribute':>9} "
              f"{'analyze':>8} {'spans/s':>9} {'MiB':>6}  verdicts")
    print(f"{row['spans']:>8} {row['failures']:>8} {row['longest_chain']:>6} {row['read_seconds']:>7.2f} "
          f"{row['build_seconds']:>7.2f} {row['attribute_seconds']:>9.2f} {row['analyze_seconds']:>8.2f} "
          f"{row['spans_per_second']:>9,.0f} {row['peak_rss_mib']:>6.0f}  {row['types']}", flush=True)


def _print_row(row: dict[str, Any], *, first: bool) -> None:
    if first:
        print("CPU seconds of a fresh process, one core; analyze = build_graph + attribute_failures")
        print(f"{'spans':>8} {'failures':>8} {'read':>7} {'build':>7} {'attribute':>9} {'analyze':>8} "
              f"{'spans/s':>9} {'types ok':>8} {'MiB':>6}")
    print(f"{row['spans']:>8} {row['failures']:>8} {row['read_seconds']:>7.2f} {row['build_seconds']:>7.2f} "
          f"{row['attribute_seconds']:>9.2f} {row['analyze_seconds']:>8.2f} {row['spans_per_second']:>9,.0f} "
          f"{row['type_matches']:>4}/{row['failures']:<3} {row['peak_rss_mib']:>6.0f}", flush=True)


if __name__ == "__main__":
    main()
