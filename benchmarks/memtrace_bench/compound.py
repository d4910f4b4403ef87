"""Cases with more than one injected fault: chained faults on one piece of information, and decoys.

* **multi** (part ``multi``): two or three faults, each of which alone broke
  the question's answer (its single-fault run did), on the same critical
  sentence; kept when at least two fire and the answer fails. The gold is the
  *earliest decisive* one: the first to fire (every one is decisive alone).
* **distractor** (part ``distractor``): one decisive fault on the question's
  critical sentence plus a decoy of another error type on the critical
  sentence of *another* question (a message this one does not cite); kept when
  both fire, the answer fails, and the decoy alone leaves it right. The gold is
  the decisive fault, whether or not the decoy ran first.

Both kinds are built from single-fault runs (which error types broke which
question): those of the injected cells, and, for clean answers the cells did not
try, unexported probe runs aimed exactly as a cell aims them (``job.decisive_types``),
made only while a part still wants cases. Combinations whose first fault is
ingestion-side are tried first: a query-side fault that runs first takes the
critical unit away, so a later fault rarely finds anything of it left to act on.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from memtrace_bench.faults import INGESTION_SIDE, QUERY_SIDE, Injection, inject
from memtrace_bench.locomo import QA, Conversation
from memtrace_bench.spread import CategoryQuota
from memtrace_bench.systems.base import Fault, MemorySystem, QuestionOutcome, StoreState
from memtrace_bench.systems.interfaces import Components
from memtrace_otel.semconv import ErrorType
from memtrace_otel.spans.model import SpanRecord

__all__ = ["Compound", "Decisive", "compound_cases", "fault_for"]

_MAX_COMBINATIONS = 6
_MAX_DECOYS = 4
_RUNS_PER_CASE = 4
"""Fault runs a part may spend per case it wants (a system whose faults cannot chain, e.g. one
where every fault removes the whole message, stops trying there)."""


class _Budget:
    """The fault runs a part has left. Not thread-safe: one per part of one job."""

    def __init__(self, runs: int) -> None:
        self.left = runs

    def spend(self) -> bool:
        """Take one run; ``False`` (taking nothing) when none is left."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


class _Job(Protocol):
    cls: type[MemorySystem]
    conversation: Conversation
    components: Components
    snapshots: list[StoreState]
    final: StoreState
    seed: int
    service: str
    session_files: list[str]

    def derive(self, *parts: object) -> int: ...
    def path(self, *parts: str) -> str: ...
    def write(self, relative: str, records: list[SpanRecord]) -> None: ...
    def case_id(self, qa: QA, error_type: ErrorType | None = None) -> str: ...
    def decisive_types(self, item: Decisive) -> list[ErrorType]: ...


@dataclass(slots=True)
class Decisive:
    """A clean answer, and the error types whose single fault broke it."""

    outcome: QuestionOutcome
    qa: QA
    types: list[ErrorType] = field(default_factory=list)


@dataclass(slots=True)
class Compound:
    """One kept compound case: the run, its gold fault, and every fault's role."""

    injection: Injection
    gold: tuple[Fault, dict[str, str]]
    roles: list[dict[str, Any]]
    part: str


def fault_for(error_type: ErrorType, outcome: QuestionOutcome, case_id: str, variant: int) -> Fault:
    """The fault of ``error_type`` aimed at ``outcome``'s critical sentence (as the single pass aims it)."""
    return Fault(error_type, outcome.unit or "", outcome.source, case_id,  # type: ignore[arg-type]
                 variant=variant % 2)


def _run(job: _Job, qa: QA, faults: list[Fault], *, seed: int, keep: bool = True) -> Injection:
    return inject(job.cls, job.conversation, job.components, job.snapshots, job.final, qa, faults[0],
                  seed=seed, service=job.service, extra=faults[1:], keep=keep)


def _roles(fired: list[tuple[Fault, dict[str, str]]], gold: Fault,
           decoy: Fault | None) -> list[dict[str, Any]]:
    roles = []
    for fault, span in fired:
        role = "gold" if fault == gold else "decoy" if fault == decoy else "redundant"
        roles.append({"error_type": fault.error_type.value, "operation": span, "role": role,
                      "dia_id": fault.sentence.dia_id})
    return roles


def _combinations(types: list[ErrorType], rng: random.Random) -> list[tuple[ErrorType, ...]]:
    """Pairs and triples of ``types``, led by ingestion-side ones and triples (shuffled within)."""
    types = [t for t in types if t is not ErrorType.DELETION or ErrorType.UPDATE not in types]
    combos = [c for size in (3, 2) for c in itertools.combinations(types, size)]
    rng.shuffle(combos)
    return sorted(combos, key=lambda c: (c[0] not in INGESTION_SIDE, -len(c)))


def _multi(job: _Job, item: Decisive, rng: random.Random, budget: _Budget) -> Compound | None:
    for combo in _combinations(item.types, rng)[:_MAX_COMBINATIONS]:
        if not budget.spend():
            return None
        case_id = f"{job.case_id(item.qa)}/multi-" + "+".join(t.value for t in combo)
        faults = [fault_for(t, item.outcome, case_id, job.derive(case_id)) for t in combo]
        faults[1:] = [replace(f, message_scope=True) for f in faults[1:]]
        result = _run(job, item.qa, faults, seed=job.derive(case_id))
        if result.outcome.passed or len(result.fired) < 2:
            continue
        gold = result.fired[0]  # every fault breaks the answer alone: the earliest is decisive
        return Compound(result, gold, _roles(result.fired, gold[0], None), "multi")
    return None


def _distractor(job: _Job, item: Decisive, others: list[Decisive], rng: random.Random,
                budget: _Budget) -> Compound | None:
    cited = set(item.qa.evidence)
    decoys = [o for o in others if o.outcome.source is not None and o.outcome.source.dia_id not in cited
              and o.outcome.unit != item.outcome.unit and o.types]
    rng.shuffle(decoys)
    # A query-side decoy acts only on what this question's retrieval returns: those first.
    context = set(item.outcome.context_units)
    decoys.sort(key=lambda o: o.outcome.unit not in context)
    gold_type = rng.choice(item.types)
    for other in decoys[:_MAX_DECOYS]:
        decoy_types = [t for t in other.types if t is not gold_type
                       and {t, gold_type} != {ErrorType.UPDATE, ErrorType.DELETION}]
        if not decoy_types:
            continue
        if not budget.spend():
            return None
        if other.outcome.unit not in context:
            decoy_types = [t for t in decoy_types if t not in QUERY_SIDE] or decoy_types
        decoy_type = rng.choice(decoy_types)
        case_id = f"{job.case_id(item.qa)}/{gold_type.value}+decoy-{decoy_type.value}"
        seed = job.derive(case_id)
        gold = fault_for(gold_type, item.outcome, case_id, seed)
        decoy = fault_for(decoy_type, other.outcome, case_id, seed)
        result = _run(job, item.qa, [gold, decoy], seed=seed)
        fired = dict(result.fired)
        if result.outcome.passed or gold not in fired or decoy not in fired:
            continue
        alone = _run(job, item.qa, [decoy], seed=seed, keep=False)  # only its answer matters
        if not alone.outcome.passed:
            continue  # the decoy broke the answer by itself: not a decoy
        return Compound(result, (gold, fired[gold]), _roles(result.fired, gold, decoy), "distractor")
    return None


def compound_cases(job: _Job, candidates: list[Decisive], *, multi: int, distractors: int,
                   query_records: list[SpanRecord]) -> Iterator[tuple[Compound, Decisive, list[str]]]:
    """Up to ``multi`` multi-fault and ``distractors`` distractor cases of ``job``; each with the span
    files (relative to the benchmark) that hold it. Query-side-only runs append to ``query_records``.

    ``candidates`` are clean answers in the order to try them (those already known decisive first);
    ``job.decisive_types`` completes an item's types (probing what no cell tried) when a part needs it.
    Each part has a category quota planned for its wanted count."""
    rng = random.Random(job.derive("compound"))
    wanted = {"multi": multi, "distractor": distractors}
    quotas = {part: CategoryQuota(planned=n) for part, n in wanted.items()}
    budgets = {part: _Budget(n * _RUNS_PER_CASE) for part, n in wanted.items()}
    for item in candidates:
        for part in ("multi", "distractor"):
            if wanted[part] <= 0 or not budgets[part].left or not quotas[part].allows(item.qa.category):
                continue
            types = job.decisive_types(item)
            if len(types) < (2 if part == "multi" else 1):
                continue
            if part == "multi":
                found = _multi(job, item, rng, budgets[part])
            else:
                decoys = [d for d in candidates if d is not item and d.types]
                found = _distractor(job, item, decoys, rng, budgets[part])
            if found is None:
                continue
            wanted[part] -= 1
            quotas[part].add(item.qa.category)
            yield found, item, _spans(job, found, query_records)
        if not any(wanted[p] > 0 and budgets[p].left for p in wanted):
            return


def _spans(job: _Job, found: Compound, query_records: list[SpanRecord]) -> list[str]:
    result = found.injection
    if result.first_session == len(job.conversation.sessions):
        query_records.extend(result.records)
        return [*job.session_files, job.path("query_faults.jsonl.gz")]
    case_id = "-".join(result.outcome.case_id.split("/")[2:])
    case_file = job.path("cases", f"{case_id}.jsonl.gz")
    job.write(case_file, result.records)
    return [*job.session_files[:result.first_session], case_file]
