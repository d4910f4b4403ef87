"""``memtrace bench build``: labelled failure cases from clean runs plus one injected fault each.

For each (system, conversation) job: ingest cleanly, one trace per session,
snapshotting the store before each session; ask every non-adversarial
question; keep the correctly answered ones whose answer was read from an
evidence message; then, per applicable error type, inject a fault aimed at
that sentence and keep the case when the answer now fails. Jobs run in a
process pool; every trace/span id comes from a seed, so a rebuild with the
same seed writes the same labels.

Layout of ``out``: ``labels.jsonl``, ``natural_failures.jsonl``,
``manifest.json`` and ``spans/<system>/<conversation>/`` (``clean/sNN`` per
session, ``clean/questions``, ``query_faults``, ``cases/<n>``; all
``.jsonl.gz``). Label ``spans`` paths are relative to ``out``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import multiprocessing
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from memtrace_bench.compound import Decisive, compound_cases
from memtrace_bench.faults import QUERY_SIDE, Injection, inject
from memtrace_bench.locomo import (
    QA,
    Conversation,
    check_conversation_id,
    conversation_ids,
    load_conversation,
)
from memtrace_bench.repair import CleanRun, repair_question
from memtrace_bench.spanfiles import write_span_file
from memtrace_bench.spread import CategoryQuota, balance, round_robin
from memtrace_bench.systems import SYSTEMS, offline_components
from memtrace_bench.systems.base import Fault, MemorySystem, QuestionOutcome, StoreState, TracedRun
from memtrace_bench.systems.interfaces import Components
from memtrace_bench.systems.oracle import Loss, Repair, key_sentences, verbatim_sentences
from memtrace_otel.semconv import ErrorType
from memtrace_otel.spans.model import SpanRecord

__all__ = ["BuildConfig", "JobResult", "build", "components", "derive_seed", "quick_config", "replayable",
           "run_job"]

ADVERSARIAL = 5
NATURAL_LIMITS = {"long-context": 20, "mem0-style": 30}


@dataclass(slots=True)
class BuildConfig:
    """What to build. ``per_conversation`` caps kept cases per (system, conversation, type)."""

    out: str
    seed: int = 0
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    conversations: list[str] | None = None
    max_sessions: int | None = None
    per_conversation: int = 5
    attempts_factor: int = 4
    jobs: int = 2
    locomo: str | None = None
    embedder: str = "auto"
    natural_per_conversation: int = 40
    natural_limits: dict[str, int] = field(default_factory=lambda: dict(NATURAL_LIMITS))
    """Lower caps on natural failures tried per conversation for systems whose repair replays
    re-ingest most of the conversation (seconds per failure, not milliseconds)."""
    multi_per_conversation: int = 12
    distractor_per_conversation: int = 16
    llm: bool = False
    """Run the LLM steps (answerer, judge, extractor, update decider) through the OpenAI-compatible
    endpoint configured in the environment (``memtrace_otel.llm_client``) instead of offline."""

    def natural_cap(self, system: str) -> int:
        """Natural failures tried per (``system``, conversation)."""
        default = self.natural_per_conversation
        return min(default, self.natural_limits.get(system, default))


def quick_config(out: str, seed: int = 0) -> BuildConfig:
    """A tiny build for tests: one conversation, its first eight sessions, two cases a cell."""
    return BuildConfig(out=out, seed=seed, conversations=["26"], max_sessions=8, per_conversation=2,
                       jobs=1, natural_per_conversation=6, multi_per_conversation=2,
                       distractor_per_conversation=2)


@dataclass(slots=True)
class JobResult:
    system: str
    conversation: str
    labels: list[dict[str, Any]]
    natural_failures: list[dict[str, Any]]
    clean: list[dict[str, Any]]
    attempts: dict[str, int]
    seconds: float
    natural: dict[str, int] = field(default_factory=dict)
    probes: dict[str, int] = field(default_factory=dict)


def components(config: BuildConfig) -> Components:
    """The LLM steps of a build: offline, or through the configured endpoint (``config.llm``).

    Constructing them calls no model; a missing endpoint shows at the first call.
    """
    if config.llm:
        from memtrace_bench.systems.openai_llm import llm_components

        return llm_components(embedder=config.embedder)
    return offline_components(embedder=config.embedder)


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from any parts (not Python's salted ``hash``).

    >>> derive_seed(0, "rag", "26") == derive_seed(0, "rag", "26")
    True
    """
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _questions(conversation: Conversation) -> list[QA]:
    return [q for q in conversation.questions if q.category != ADVERSARIAL and q.evidence]


class _Job:
    """One (system, conversation): the clean run, then the fault runs."""

    def __init__(self, config: BuildConfig, system: str, conversation_id: str) -> None:
        self.config = config
        self.cls: type[MemorySystem] = SYSTEMS[system]
        conversation = load_conversation(conversation_id, config.locomo)
        if config.max_sessions:
            conversation = conversation.truncated(config.max_sessions)
        self.conversation = conversation
        self.components = components(config)
        self.seed = derive_seed(config.seed, system, conversation_id)
        self.service = f"memtrace-bench-{system}"
        self.base = os.path.join("spans", system, conversation_id)
        self.snapshots: list[StoreState] = []
        self.session_files: list[str] = []
        self.final = StoreState()
        self.losses: list[Loss] = []
        self.decisive: dict[str, Decisive] = {}
        self.singles: dict[tuple[str, ErrorType], bool] = {}
        """Whether the single fault of a type broke a clean answer (by its case id), for every run so far."""
        self.probes: Counter[str] = Counter()
        self.query_spans: dict[str, list[dict[str, str]]] = {}

    def derive(self, *parts: object) -> int:
        return derive_seed(self.seed, *parts)

    def path(self, *parts: str) -> str:
        return os.path.join(self.base, *parts)

    def write(self, relative: str, records: list[SpanRecord]) -> None:
        write_span_file(os.path.join(self.config.out, relative), records)

    def clean_run(self) -> list[QuestionOutcome]:
        run = TracedRun(self.seed, self.service)
        # The audit watches every question's critical information while ingesting (it changes nothing).
        system = self.cls(run.tracer, self.components, repair=self._audit())
        for session in self.conversation.sessions:
            self.snapshots.append(copy.deepcopy(system.state))
            system.ingest_session(session)
            self.session_files.append(self.path("clean", f"s{session.index:02d}.jsonl.gz"))
            self.write(self.session_files[-1], run.sink.drain())
        self.final, self.losses, system.repair = system.state, system.losses, None
        outcomes = [system.ask(q, self.case_id(q)) for q in _questions(self.conversation)]
        self.query_spans = system.query_spans
        self.write(self.path("clean", "questions.jsonl.gz"), run.sink.drain())
        run.close()
        return outcomes

    def _audit(self) -> Repair:
        keys = tuple(dict.fromkeys(k for q in _questions(self.conversation)
                                   for k in key_sentences(self.conversation, q)))
        return Repair(keys, None, verbatim_sentences(self.conversation, keys))

    def clean(self) -> CleanRun:
        """The clean run, for counterfactual replays (after :meth:`clean_run`)."""
        return CleanRun(self.cls, self.conversation, self.components, self.snapshots, self.final,
                        self.losses, self.query_spans, self.seed, self.service)

    def case_id(self, qa: QA, error_type: ErrorType | None = None) -> str:
        base = f"{self.cls.name}/{self.conversation.sample_id}/q{qa.index}"
        return f"{base}/{error_type.value}" if error_type else base

    def run(self) -> JobResult:
        started = time.perf_counter()
        outcomes = self.clean_run()
        by_case = {self.case_id(q): q for q in _questions(self.conversation)}
        usable = [o for o in outcomes if o.passed and o.source is not None and o.unit is not None
                  and o.source.dia_id in o.evidence]
        # Round-robin over question categories, so no category crowds out the others.
        usable = round_robin(usable, len(usable), self.seed, category=lambda o: o.category)
        labels: list[dict[str, Any]] = []
        attempts: Counter[str] = Counter()
        query_records: list[SpanRecord] = []
        for error_type in self.cls.applicable:
            labels.extend(self._cases(error_type, usable, by_case, attempts, query_records))
        decisive = round_robin(list(self.decisive.values()), len(self.decisive), self.seed,
                               category=lambda d: d.qa.category)
        # Then the clean answers no cell kept: probed for decisive types only while a part wants cases.
        candidates = decisive + [Decisive(o, by_case[o.case_id]) for o in usable
                                 if o.case_id not in self.decisive]
        for found, item, spans in compound_cases(self, candidates,
                                                 multi=self.config.multi_per_conversation,
                                                 distractors=self.config.distractor_per_conversation,
                                                 query_records=query_records):
            gold_fault, gold_span = found.gold
            label = self._label(found.injection.outcome, item.qa, gold_fault.error_type, gold_span, spans,
                                item.outcome)
            labels.append({**label, "part": found.part, "faults": found.roles})
        if query_records:
            self.write(self.path("query_faults.jsonl.gz"), query_records)
        natural = [self._natural(o) for o in outcomes if not o.passed]
        tally = self._label_natural(natural, by_case, labels)
        clean = [{"case_id": o.case_id, "category": o.category, "passed": o.passed, "score": o.score}
                 for o in outcomes]
        return JobResult(self.cls.name, self.conversation.sample_id, labels, natural, clean,
                         dict(attempts), time.perf_counter() - started, dict(tally), dict(self.probes))

    def _single(self, outcome: QuestionOutcome, qa: QA, error_type: ErrorType, *,
                keep: bool = True) -> Injection:
        """The single fault of ``error_type`` at ``outcome``'s critical sentence, as its cell aims it."""
        case_id = self.case_id(qa, error_type)
        seed = derive_seed(self.seed, case_id)
        fault = Fault(error_type, outcome.unit or "", outcome.source, case_id,  # type: ignore[arg-type]
                      variant=seed % 2)
        result = inject(self.cls, self.conversation, self.components, self.snapshots, self.final,
                        qa, fault, seed=seed, service=self.service, keep=keep)
        self.singles[(outcome.case_id, error_type)] = result.kept
        return result

    def decisive_types(self, item: Decisive) -> list[ErrorType]:
        """Every applicable type whose single fault breaks ``item``'s answer (``item.types``, completed).

        A type no cell tried on it is probed: the run a cell would make, its spans not exported
        (a probe is no case; it only says whether the fault alone breaks the answer)."""
        for error_type in self.cls.applicable:
            if (item.outcome.case_id, error_type) not in self.singles:
                self.probes[error_type.value] += 1
                self._single(item.outcome, item.qa, error_type, keep=False)
        item.types = [t for t in self.cls.applicable if self.singles[(item.outcome.case_id, t)]]
        if item.types:
            self.decisive.setdefault(item.outcome.case_id, item)
        return item.types

    def _label_natural(self, natural: list[dict[str, Any]], by_case: dict[str, QA],
                       labels: list[dict[str, Any]]) -> Counter[str]:
        """Counterfactual repair of a seeded sample of the natural failures, spread over categories.

        Each tried row gets its ``repair`` status; single-cause ones become labels (part
        ``natural``), the others stay unlabelled and are counted.
        """
        tally: Counter[str] = Counter(failures=len(natural))
        run = self.clean()
        quota, budget = CategoryQuota(), self.config.natural_cap(self.cls.name)
        for row in round_robin(natural, len(natural), self.seed):
            if budget <= 0:
                break
            if not quota.allows(row["category"]):
                continue  # its category has its share of this job's labels: not tried
            budget -= 1
            result = repair_question(run, by_case[row["case_id"]], row["case_id"])
            row["repair"] = {"status": result.status, "attempts": [a.as_dict() for a in result.attempts]}
            tally[result.status] += 1
            earliest = result.earliest
            if earliest is not None:
                quota.add(row["category"])
                tally[earliest.error_type] += 1
                labels.append({**{k: v for k, v in row.items() if k != "score"}, "part": "natural",
                               "error_type": earliest.error_type, "operation": earliest.span,
                               "seed": self.config.seed, "clean_prediction": None,
                               "critical": {"dia_id": result.keys[0] if result.keys else None, "unit": None},
                               "repair": {"target": earliest.target, "tried": len(result.attempts)}})
        return tally

    def _cases(self, error_type: ErrorType, usable: list[QuestionOutcome], by_case: dict[str, QA],
               attempts: Counter[str], query_records: list[SpanRecord]) -> Iterator[dict[str, Any]]:
        # Planned for the cell's size: the running share alone lets each cell's first cases through.
        kept, quota = 0, CategoryQuota(planned=self.config.per_conversation)
        limit = self.config.per_conversation * self.config.attempts_factor
        for outcome in usable:
            if kept >= self.config.per_conversation or attempts[error_type.value] >= limit:
                return
            if not quota.allows(outcome.category):
                continue  # its category has its share of this cell: not attempted
            attempts[error_type.value] += 1
            qa = by_case[outcome.case_id]
            result = self._single(outcome, qa, error_type)
            if not result.kept:
                continue
            kept += 1
            quota.add(outcome.category)
            self.decisive.setdefault(outcome.case_id, Decisive(outcome, qa)).types.append(error_type)
            if error_type in QUERY_SIDE:
                query_records.extend(result.records)
                spans = [*self.session_files, self.path("query_faults.jsonl.gz")]
            else:
                case_file = self.path("cases", f"q{qa.index}-{error_type.value}.jsonl.gz")
                self.write(case_file, result.records)
                spans = [*self.session_files[:result.first_session], case_file]
            yield self._label(result.outcome, qa, error_type, result.fault_span or {}, spans, outcome)

    def _label(self, outcome: QuestionOutcome, qa: QA, error_type: ErrorType, span: dict[str, str],
               spans: list[str], clean: QuestionOutcome) -> dict[str, Any]:
        return {
            "case_id": outcome.case_id, "system": self.cls.name,
            "conversation": self.conversation.sample_id, "question": qa.question, "gold": qa.answer,
            "prediction": outcome.prediction, "clean_prediction": clean.prediction,
            "evidence": list(qa.evidence), "category": qa.category, "error_type": error_type.value,
            "operation": span, "spans": spans, "seed": self.config.seed,
            "critical": {"dia_id": clean.source.dia_id if clean.source else None, "unit": clean.unit},
            "part": "injected",
        }

    def _natural(self, outcome: QuestionOutcome) -> dict[str, Any]:
        return {
            "case_id": outcome.case_id, "system": self.cls.name,
            "conversation": self.conversation.sample_id, "question": outcome.question,
            "gold": outcome.gold, "prediction": outcome.prediction, "score": outcome.score,
            "evidence": outcome.evidence, "category": outcome.category,
            "spans": [*self.session_files, self.path("clean", "questions.jsonl.gz")],
        }


def replayable(config: BuildConfig, system: str, conversation_id: str) -> tuple[CleanRun, dict[str, QA]]:
    """The clean run of ``system`` on ``conversation_id`` as ``config`` builds it (span files go to
    ``config.out``), and its questions by case id: what :func:`~memtrace_bench.repair.repair_question`
    replays."""
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")
    job = _Job(config, system, check_conversation_id(conversation_id))
    job.clean_run()
    return job.clean(), {job.case_id(q): q for q in _questions(job.conversation)}


def run_job(args: tuple[BuildConfig, str, str]) -> JobResult:
    """One (system, conversation) job; top-level so a process pool can run it."""
    config, system, conversation_id = args
    return _Job(config, system, conversation_id).run()


def _jobs(config: BuildConfig) -> list[tuple[BuildConfig, str, str]]:
    unknown = [s for s in config.systems if s not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    # Ids become directory names under ``out``: a path must not pass (checked before any work).
    conversations = [check_conversation_id(c)
                     for c in config.conversations or conversation_ids(config.locomo)]
    # Heaviest systems first so the pool's last jobs are short ones.
    weight = {"long-context": 0, "mem0-style": 1, "rag": 2, "episodic": 3}
    ordered = sorted(config.systems, key=lambda s: weight.get(s, 9))
    return [(config, s, c) for s in ordered for c in conversations]


def build(config: BuildConfig,
          progress: Callable[[JobResult, int, int], None] | None = None) -> dict[str, Any]:
    """Build the benchmark into ``config.out``; the manifest it wrote."""
    started = time.perf_counter()
    jobs = _jobs(config)
    os.makedirs(config.out, exist_ok=True)
    results: list[JobResult] = []
    if config.jobs > 1 and len(jobs) > 1:
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                              else None)
        with context.Pool(min(config.jobs, len(jobs))) as pool:
            for result in pool.imap_unordered(run_job, jobs):
                results.append(result)
                if progress:
                    progress(result, len(results), len(jobs))
    else:
        for job in jobs:
            results.append(run_job(job))
            if progress:
                progress(results[-1], len(results), len(jobs))
    order = {(s, c): i for i, (_, s, c) in enumerate(_jobs(config))}
    results.sort(key=lambda r: order[(r.system, r.conversation)])
    dropped = _balance(config, results)
    _write_jsonl(os.path.join(config.out, "labels.jsonl"), (x for r in results for x in r.labels))
    _write_jsonl(os.path.join(config.out, "natural_failures.jsonl"),
                 (x for r in results for x in r.natural_failures))
    manifest = _manifest(config, results, time.perf_counter() - started)
    manifest["spread_dropped"] = dropped
    with open(os.path.join(config.out, "manifest.json"), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
    return manifest


def _balance(config: BuildConfig, results: list[JobResult]) -> dict[str, int]:
    """Drop the fewest labels that bring every built part to no category above its share
    (:func:`~memtrace_bench.spread.balance`), and the case span files only they used.

    Natural labels stay: each is a repaired natural failure, counted in the repair summary. The
    jobs' quotas keep what is dropped here small; this makes the share hold over the whole build."""
    dropped: dict[str, int] = {}
    for part in ("injected", "multi", "distractor"):
        rows = [(r, label) for r in results for label in r.labels if label.get("part") == part]
        _, gone = balance(rows, derive_seed(config.seed, "balance", part),
                          category=lambda x: x[1]["category"])
        if not gone:
            continue
        dropped[part] = len(gone)
        for result, label in gone:
            result.labels.remove(label)
        used = {path for r in results for label in r.labels for path in label["spans"]}
        for path in {p for _, label in gone for p in label["spans"] if "/cases/" in p} - used:
            os.remove(os.path.join(config.out, path))
    return dropped


def _write_jsonl(path: str, rows: Iterator[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True) + "\n")


def _natural_summary(tally: Counter[str]) -> dict[str, Any]:
    single, other = tally.get("single-cause", 0), tally.get("not-single-cause", 0)
    return {"failures": tally.get("failures", 0), "tried": single + other, "single_cause": single,
            "not_single_cause": other,
            "by_error_type": {t.value: tally[t.value] for t in ErrorType if tally.get(t.value)}}


def _shares(counts: Counter[str]) -> dict[str, Any]:
    """Cases per LoCoMo category, and each category's share of them."""
    total = sum(counts.values())
    return {c: {"cases": n, "share": round(n / total, 4)} for c, n in sorted(counts.items())}


def _manifest(config: BuildConfig, results: list[JobResult], seconds: float) -> dict[str, Any]:
    cells: dict[str, Counter[str]] = defaultdict(Counter)
    attempts: dict[str, Counter[str]] = defaultdict(Counter)
    probes: dict[str, Counter[str]] = defaultdict(Counter)
    clean: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    parts: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    spread: dict[str, Counter[str]] = defaultdict(Counter)
    natural: Counter[str] = Counter()
    for result in results:
        natural.update(result.natural)
        for label in result.labels:
            part = label.get("part", "injected")
            parts[part][result.system][label["error_type"]] += 1
            spread[part][str(label["category"])] += 1
            spread["all"][str(label["category"])] += 1
            if part == "injected":
                cells[result.system][label["error_type"]] += 1
        attempts[result.system].update(result.attempts)
        probes[result.system].update(result.probes)
        for row in result.clean:
            tally = clean[result.system][str(row["category"])]
            tally[0] += int(row["passed"])
            tally[1] += 1
    settings = {k: v for k, v in asdict(config).items() if k not in ("out", "jobs")}
    description = components(config).description
    return {
        "seed": config.seed, "settings": settings, "components": description,
        "labelled_cases": sum(len(r.labels) for r in results),
        "natural_failures": sum(len(r.natural_failures) for r in results),
        "natural_repair": _natural_summary(natural),
        "parts": {p: sum(sum(c.values()) for c in systems.values()) for p, systems in sorted(parts.items())},
        "cases_by_part": {p: {s: dict(c) for s, c in by_system.items()}
                          for p, by_system in sorted(parts.items())},
        "category_spread": {p: _shares(c) for p, c in sorted(spread.items())},
        "cases": {s: dict(c) for s, c in cells.items()},
        "attempts": {s: dict(c) for s, c in attempts.items()},
        "probes": {s: dict(c) for s, c in probes.items()},
        "applicable": {s: [t.value for t in SYSTEMS[s].applicable] for s in config.systems},
        "not_applicable": {s: SYSTEMS[s].not_applicable for s in config.systems},
        "clean_accuracy": {s: {cat: {"passed": p, "total": t, "accuracy": round(p / t, 4) if t else None}
                               for cat, (p, t) in sorted(cats.items())} for s, cats in clean.items()},
        "seconds": round(seconds, 2),
        "job_seconds": {f"{r.system}/{r.conversation}": round(r.seconds, 2) for r in results},
    }
