"""Fault injection: run a system with one perturbed operation and see whether the answer fails.

Two kinds of fault, by where the perturbed operation runs:

* ingestion-side (ExtractionError, UpdateError, DeletionError): the system is
  restored from its snapshot at the start of the session holding the critical
  message and re-ingests from there with the fault; earlier sessions' span
  files are shared with the clean run.
* query-side (RetrievalError, ResponseError): the clean final store answers
  the question again with the fault; the ingestion span files are all shared.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

from memtrace_bench.locomo import QA, Conversation
from memtrace_bench.systems.base import Fault, MemorySystem, QuestionOutcome, StoreState, TracedRun
from memtrace_bench.systems.interfaces import Components
from memtrace_otel.semconv import ErrorType
from memtrace_otel.spans.model import SpanRecord

__all__ = ["INGESTION_SIDE", "QUERY_SIDE", "Injection", "inject", "session_position"]

INGESTION_SIDE = (ErrorType.EXTRACTION, ErrorType.UPDATE, ErrorType.DELETION)
QUERY_SIDE = (ErrorType.RETRIEVAL, ErrorType.RESPONSE)


@dataclass(slots=True)
class Injection:
    """The result of one fault run: the answer, the perturbed span, the spans to keep."""

    outcome: QuestionOutcome
    fault_span: dict[str, str] | None
    records: list[SpanRecord]
    first_session: int
    fired: list[tuple[Fault, dict[str, str]]] = field(default_factory=list)
    """Every fault that fired, with its span, in firing order (the first is ``fault_span``)."""

    @property
    def kept(self) -> bool:
        """A case exists only when exactly the fault fired and the answer now fails."""
        return self.fault_span is not None and not self.outcome.passed


def session_position(conversation: Conversation, dia_id: str) -> int:
    """Index into ``conversation.sessions`` of the session holding message ``dia_id``."""
    for position, session in enumerate(conversation.sessions):
        if any(turn.dia_id == dia_id for turn in session.turns):
            return position
    raise ValueError(f"message {dia_id} is not in conversation {conversation.sample_id}")


def inject(system: type[MemorySystem], conversation: Conversation, components: Components,
           snapshots: list[StoreState], final: StoreState, qa: QA, fault: Fault, *,
           seed: int, service: str, apply: bool = True, extra: Sequence[Fault] = (),
           keep: bool = True) -> Injection:
    """Run ``system`` with ``fault`` (and the ``extra`` faults, one per error type) and ask ``qa``
    under case id ``fault.case_id``.

    ``snapshots[i]`` is the clean state before session ``i``; ``final`` the clean
    state after all sessions (not modified). ``apply=False`` runs the very same
    path without the faults: the control that shows the faults break the answer.
    ``keep=False`` drops the spans unexported (``records`` is empty): a run only asked for its answer.
    """
    faults = (fault, *extra)
    ingestion = [f for f in faults if f.error_type in INGESTION_SIDE]
    run = TracedRun(seed, service, keep=keep)
    try:
        if ingestion:
            start = min(session_position(conversation, f.sentence.dia_id) for f in ingestion)
            instance = system(run.tracer, components, state=copy.deepcopy(snapshots[start]),
                              faults=faults if apply else ())
            for session in conversation.sessions[start:]:
                instance.ingest_session(session)
        else:
            start = len(conversation.sessions)
            instance = system(run.tracer, components, state=final, faults=faults if apply else ())
        outcome = instance.ask(qa, fault.case_id)
        fired = [(instance.faults[i], span) for i, span in instance.fired.items()]
        return Injection(outcome, instance.fault_span, run.sink.drain(), start, fired)
    finally:
        run.close()
