"""GenAI attributes of a memory operation: retrievals, memory records, LLM calls, evaluations.

Plain functions from what the application tells an :class:`~memtrace_otel.instrument.Operation`
to the span attributes the OpenTelemetry GenAI semantic conventions define for it
(``docs/conventions.md`` says, key by key, which are the spec's). Whether content
goes on the span is decided once, by the tracer; these functions only receive
the answer as ``capture`` and leave every content key out without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from memtrace_otel.instrument.variables import Variable
from memtrace_otel.semconv import (
    EvaluationScoreLabel,
    EvaluationSignal,
    GenAI,
    GenAIRecord,
    MemTrace,
)

__all__ = ["RetrievedRecord", "evaluation_attributes", "evaluation_event", "llm_call_attributes",
           "retrieval_attributes", "stored_records_attributes"]


@dataclass(frozen=True, slots=True)
class RetrievedRecord:
    """One record a retrieval returned: the variable read, its score, its id in the store.

    ``record_id`` defaults to the variable's name (what ``Operation.read_record``
    and the reference systems name a stored record by).
    """

    variable: Variable
    score: float | None = None
    record_id: str | None = None

    @property
    def id(self) -> str:
        return self.variable.name if self.record_id is None else self.record_id


def _retrieved(record: RetrievedRecord | Variable) -> RetrievedRecord:
    return record if isinstance(record, RetrievedRecord) else RetrievedRecord(record)


def _record_json(records: Sequence[RetrievedRecord], limit: int) -> str:
    # The GenAI memory-records / retrieval-documents schema: id, content, score (score only when known).
    items: list[dict[str, Any]] = []
    for record in records:
        item: dict[str, Any] = {GenAIRecord.ID: record.id,
                                GenAIRecord.CONTENT: (record.variable.content or "")[:limit]}
        if record.score is not None:
            item[GenAIRecord.SCORE] = float(record.score)
        items.append(item)
    return json.dumps(items, ensure_ascii=False)


def retrieval_attributes(
    records: Iterable[RetrievedRecord | Variable],
    *,
    memory: bool,
    query: str | None = None,
    top_k: int | None = None,
    data_source_id: str | None = None,
    capture: bool = False,
    limit: int = 4096,
) -> dict[str, Any]:
    """Span attributes of a retrieval that returned ``records``.

    Parameters
    ----------
    records:
        What the retrieval returned, best first: variables, or :class:`RetrievedRecord`
        to give a score or a store id.
    memory:
        A memory search (``gen_ai.memory.query.text`` / ``gen_ai.memory.records``) rather
        than a retrieval (``gen_ai.retrieval.query.text`` / ``gen_ai.retrieval.documents``).
    query, top_k, data_source_id:
        The query text, how many records were asked for, the data source searched.
    capture:
        Content capture: the query and the records' contents go on the span only then.
    limit:
        Truncation limit of one content string.

    Returns
    -------
    dict
        ``gen_ai.memory.record.count`` always; the rest when given (content keys only with
        ``capture``). Never ``gen_ai.memory.record.id``: the conventions mean it for the one
        record a create, update or delete applies to, and a search that happened to return one
        record does not apply to it (its id is in ``gen_ai.memory.records``).

    >>> from memtrace_otel.semconv import VariableKind
    >>> unit = Variable("mem:7", 2, VariableKind.MEMORY_UNIT, "User lives in Porto")
    >>> retrieval_attributes([RetrievedRecord(unit, 0.9)], memory=True, top_k=5, query="Where?",
    ...                      capture=True)  # doctest: +NORMALIZE_WHITESPACE
    {'gen_ai.memory.record.count': 1, 'gen_ai.retrieval.top_k': 5,
     'gen_ai.memory.query.text': 'Where?',
     'gen_ai.memory.records': '[{"id": "mem:7", "content": "User lives in Porto", "score": 0.9}]'}
    """
    found = records if isinstance(records, list | tuple) else list(records)  # wrapped only when written
    attributes: dict[str, Any] = {GenAI.MEMORY_RECORD_COUNT: len(found)}
    if top_k is not None:
        attributes[GenAI.RETRIEVAL_TOP_K] = int(top_k)
    if data_source_id is not None:
        attributes[GenAI.DATA_SOURCE_ID] = data_source_id
    if capture:
        if query is not None:
            attributes[GenAI.MEMORY_QUERY_TEXT if memory else GenAI.RETRIEVAL_QUERY_TEXT] = query[:limit]
        attributes[GenAI.MEMORY_RECORDS if memory else GenAI.RETRIEVAL_DOCUMENTS] = _record_json(
            [_retrieved(r) for r in found], limit)
    return attributes


def stored_records_attributes(records: Iterable[RetrievedRecord | Variable], *, capture: bool,
                              limit: int = 4096) -> dict[str, Any]:
    """The opt-in ``gen_ai.memory.records`` of a create, update or upsert: the records it stored.

    The conventions define the attribute for "the memory records stored or retrieved"; without
    content capture there is nothing to write (ids and the count are on the span anyway).

    >>> from memtrace_otel.semconv import VariableKind
    >>> unit = Variable("mem:7", 2, VariableKind.MEMORY_UNIT, "User lives in Porto")
    >>> stored_records_attributes([unit], capture=True)
    {'gen_ai.memory.records': '[{"id": "mem:7", "content": "User lives in Porto"}]'}
    >>> stored_records_attributes([unit], capture=False)
    {}
    """
    if not capture:
        return {}
    return {GenAI.MEMORY_RECORDS: _record_json([_retrieved(r) for r in records], limit)}


def llm_call_attributes(
    *,
    model: str | None = None,
    provider: str | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    response_model: str | None = None,
) -> dict[str, Any]:
    """Span attributes of an LLM call made inside an operation (none of them content).

    >>> llm_call_attributes(model="gpt-4o-mini", provider="openai", input_tokens=120, output_tokens=8)
    ... # doctest: +NORMALIZE_WHITESPACE
    {'gen_ai.request.model': 'gpt-4o-mini', 'gen_ai.provider.name': 'openai',
     'gen_ai.usage.input_tokens': 120, 'gen_ai.usage.output_tokens': 8}
    """
    attributes: dict[str, Any] = {}
    for key, value in ((GenAI.REQUEST_MODEL, model), (GenAI.PROVIDER_NAME, provider),
                       (GenAI.RESPONSE_MODEL, response_model)):
        if value is not None:
            attributes[key] = value
    for key, count in ((GenAI.USAGE_INPUT_TOKENS, input_tokens), (GenAI.USAGE_OUTPUT_TOKENS, output_tokens)):
        if count is not None:
            attributes[key] = int(count)
    return attributes


def evaluation_attributes(
    passed: bool,
    signal: EvaluationSignal,
    *,
    score: float | None,
    evidence: Iterable[str],
    answer: Variable | None,
    case_id: str | None,
    texts: dict[str, str | None],
    capture: bool,
    limit: int,
) -> dict[str, Any]:
    """``memtrace.evaluation.*`` span attributes of a verdict.

    ``texts`` maps the content keys (question, prediction, gold, explanation) to their
    values; they are written only with ``capture``.

    >>> evaluation_attributes(False, EvaluationSignal.GOLD, score=0.0, evidence=["D1:1"], answer=None,
    ...                       case_id="q1", texts={MemTrace.EVALUATION_GOLD: "Paris"}, capture=False,
    ...                       limit=10)  # doctest: +NORMALIZE_WHITESPACE
    {'memtrace.evaluation.passed': False, 'memtrace.evaluation.signal': 'gold',
     'memtrace.evaluation.evidence': ['D1:1'], 'memtrace.evaluation.score': 0.0,
     'memtrace.evaluation.case': 'q1'}
    """
    attributes: dict[str, Any] = {
        MemTrace.EVALUATION_PASSED: passed,
        MemTrace.EVALUATION_SIGNAL: signal.value,
        MemTrace.EVALUATION_EVIDENCE: list(evidence),
    }
    if score is not None:
        attributes[MemTrace.EVALUATION_SCORE] = float(score)
    if answer is not None:
        attributes[MemTrace.EVALUATION_ANSWER] = answer.id
    if case_id is not None:
        attributes[MemTrace.EVALUATION_CASE] = case_id
    if capture:
        attributes.update((key, value[:limit]) for key, value in texts.items() if value is not None)
    return attributes


def evaluation_event(passed: bool, metric: str, *, score: float | None, explanation: str | None,
                     capture: bool, limit: int) -> dict[str, Any]:
    """Attributes of the GenAI ``gen_ai.evaluation.result`` event of a verdict.

    >>> evaluation_event(True, "memtrace.answer_correctness", score=1.0, explanation="ok",
    ...                  capture=False, limit=10)  # doctest: +NORMALIZE_WHITESPACE
    {'gen_ai.evaluation.name': 'memtrace.answer_correctness', 'gen_ai.evaluation.score.label': 'pass',
     'gen_ai.evaluation.score.value': 1.0}
    """
    label = EvaluationScoreLabel.PASS if passed else EvaluationScoreLabel.FAIL
    event: dict[str, Any] = {GenAI.EVALUATION_NAME: metric, GenAI.EVALUATION_SCORE_LABEL: label.value}
    if score is not None:
        event[GenAI.EVALUATION_SCORE_VALUE] = float(score)
    if explanation is not None and capture:
        event[GenAI.EVALUATION_EXPLANATION] = explanation[:limit]
    return event
