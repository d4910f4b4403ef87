"""Counterfactual repair: which one operation, repaired alone, restores a failed answer.

For a question a reference system answered wrong in its clean run, every
operation that lost some of the question's critical information is a
candidate (:class:`~memtrace_bench.systems.oracle.Loss`): the ingestion-side
ones the clean run recorded while it ran, and the question-time ones a replay of
the question finds. The run is replayed once per candidate, in execution order,
with that operation alone replaced by its oracle version (it keeps the
evidence: the fault injectors in reverse); ingestion-side replays restart from
the snapshot of the operation's session. The *earliest* candidate whose repair
alone makes the judge pass is the failure's root cause. When none does (two
operations each lost it, or nothing lost it and the reader still failed), the
failure is *not single-cause*: kept apart, counted, never labelled.

>>> RepairOutcome("rag/26/q3", []).single_cause
False
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from memtrace_bench.locomo import QA, Conversation
from memtrace_bench.systems.base import MemorySystem, QuestionOutcome, StoreState, TracedRun
from memtrace_bench.systems.interfaces import Components
from memtrace_bench.systems.oracle import Loss, Repair, key_sentences, verbatim_sentences

__all__ = ["Attempt", "CleanRun", "RepairOutcome", "candidates", "check_verdict", "question_repair",
           "repair_question", "replay"]

SINGLE_CAUSE = "single-cause"
NOT_SINGLE_CAUSE = "not-single-cause"


@dataclass(slots=True)
class CleanRun:
    """What a (system, conversation) clean run leaves for replays.

    ``snapshots[i]``: the store before session ``i`` (position in ``conversation.sessions``);
    ``losses``: the ingestion-side losses its audit recorded (:class:`Loss`, spans of the clean
    run); ``query_spans``: per case id, the clean run's question-time spans in order.
    """

    system: type[MemorySystem]
    conversation: Conversation
    components: Components
    snapshots: list[StoreState]
    final: StoreState
    losses: list[Loss]
    query_spans: dict[str, list[dict[str, str]]]
    seed: int
    service: str


@dataclass(slots=True)
class Attempt:
    """One candidate operation repaired alone, and what the answer became."""

    target: int | str
    error_type: str
    span: dict[str, str]
    session: int | None
    restored: bool
    prediction: str

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "error_type": self.error_type, "operation": self.span,
                "session": self.session, "restored": self.restored, "prediction": self.prediction}


@dataclass(slots=True)
class RepairOutcome:
    """The attempts on one failed question, in execution order; ``earliest`` restored it first."""

    case_id: str
    attempts: list[Attempt]
    keys: list[str] = field(default_factory=list)

    @property
    def earliest(self) -> Attempt | None:
        return next((a for a in self.attempts if a.restored), None)

    @property
    def single_cause(self) -> bool:
        return self.earliest is not None

    @property
    def status(self) -> str:
        return SINGLE_CAUSE if self.single_cause else NOT_SINGLE_CAUSE


def question_repair(run: CleanRun, qa: QA, target: int | str | None = None) -> Repair:
    """The repair of ``qa``'s critical information aimed at ``target`` (``None``: only watch)."""
    keys = key_sentences(run.conversation, qa)
    return Repair(keys, target, verbatim_sentences(run.conversation, keys))


def _position(run: CleanRun, session: int | None) -> int:
    for position, candidate in enumerate(run.conversation.sessions):
        if candidate.index == session:
            return position
    raise ValueError(f"session {session} is not in conversation {run.conversation.sample_id}")


def replay(run: CleanRun, qa: QA, case_id: str, repair: Repair, *,
           session: int | None = None) -> tuple[QuestionOutcome, list[Loss]]:
    """Ask ``qa`` again under ``repair``: from the snapshot of ``session`` (its LoCoMo index) with
    re-ingestion, or on the clean final store when ``session`` is ``None``.

    Returns the answer and the losses the replay recorded. The replay's spans are dropped:
    a case's spans are its clean run's.
    """
    traced = TracedRun(0, run.service, keep=False)
    try:
        if session is None:
            system = run.system(traced.tracer, run.components, state=run.final, repair=repair)
        else:
            start = _position(run, session)
            system = run.system(traced.tracer, run.components, state=copy.deepcopy(run.snapshots[start]),
                                repair=repair)
            for each in run.conversation.sessions[start:]:
                system.ingest_session(each)
                traced.sink.drain()
        outcome = system.ask(qa, case_id)
        return outcome, system.losses
    finally:
        traced.close()


def candidates(run: CleanRun, qa: QA, case_id: str) -> list[Loss]:
    """The operations that lost ``qa``'s critical information, in execution order, with clean-run spans."""
    watch = question_repair(run, qa)
    keys = set(watch.keys)
    found = [Loss(loss.ordinal, loss.error_type, tuple(k for k in loss.keys if k in keys), loss.session,
                  loss.span) for loss in run.losses if keys.intersection(loss.keys)]
    found.sort(key=lambda loss: int(loss.ordinal))
    _, asked = replay(run, qa, case_id, watch)
    clean = {span["name"]: span for span in run.query_spans.get(case_id, [])}
    found.extend(Loss(loss.ordinal, loss.error_type, loss.keys, None, clean.get(str(loss.ordinal), loss.span))
                 for loss in asked)
    return found


def repair_question(run: CleanRun, qa: QA, case_id: str, *, exhaustive: bool = False) -> RepairOutcome:
    """Repair each candidate operation of ``qa`` alone, in execution order, until the answer is right
    (every candidate when ``exhaustive``).

    Parameters
    ----------
    run:
        the clean run of the system and conversation (:class:`CleanRun`).
    qa, case_id:
        the failed question and its case id (the ``case`` of its evaluation).
    exhaustive:
        try every candidate, not only up to the first that restores the answer.

    Returns
    -------
    RepairOutcome
        ``earliest`` is the root cause; ``single_cause`` is false when no one repair restored it.
    """
    attempts = []
    for loss in candidates(run, qa, case_id):
        repair = question_repair(run, qa, loss.ordinal)
        outcome, _ = replay(run, qa, case_id, repair, session=loss.session)
        attempts.append(Attempt(loss.ordinal, loss.error_type.value, loss.span, loss.session,
                                outcome.passed, outcome.prediction))
        if outcome.passed and not exhaustive:
            break
    return RepairOutcome(case_id, attempts, [k.dia_id for k in key_sentences(run.conversation, qa)])


def check_verdict(outcome: RepairOutcome, span_id: str | None) -> str:
    """How an engine's blamed span (``span_id``) stands against the counterfactual repairs.

    ``earliest``: it is the root cause; ``restores-later``: repairing it alone restores the answer,
    but an earlier operation's repair does too; ``does-not-restore``: a candidate whose repair
    alone does not; ``not-a-candidate``: it lost none of the critical information.

    >>> a = [Attempt(3, "ExtractionError", {"span_id": "a"}, 1, True, "x"),
    ...      Attempt("rag.generate", "ResponseError", {"span_id": "b"}, None, True, "y")]
    >>> [check_verdict(RepairOutcome("c", a), s) for s in ("a", "b", "z")]
    ['earliest', 'restores-later', 'not-a-candidate']
    """
    earliest = outcome.earliest
    if earliest is not None and earliest.span.get("span_id") == span_id:
        return "earliest"
    for attempt in outcome.attempts:
        if attempt.span.get("span_id") == span_id:
            return "restores-later" if attempt.restored else "does-not-restore"
    return "not-a-candidate"
