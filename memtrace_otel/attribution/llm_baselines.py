"""One-prompt LLM baselines: ``llm-all-at-once`` and ``flat-log``.

Why they exist: they are what the MemTrace agent is measured against. Both
show the model everything at once and ask for one JSON verdict
``{"operation", "error_type", "explanation"}``; they differ only in what
they show — the compacted trace keeps lineage edges (variable ids), the flat
log is a time-ordered operation log without them.

This module also holds what the three LLM engines share: the root-cause
definition given to the model, parsing of error types, the budget guard and
how a failed model call becomes ``failure_reason``.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterable
from typing import Any, ClassVar

import networkx as nx

from memtrace_otel.attribution.base import Attribution, Engine, ErrorType, FailureCase, register_engine
from memtrace_otel.attribution.render import (
    OperationIndex,
    candidate_operations,
    render_case,
    render_compacted_trace,
    render_flat_log,
)
from memtrace_otel.graph.errors import MemTraceGraphError
from memtrace_otel.graph.node_types import VARIABLE
from memtrace_otel.graph.query import backward_slice, evidence_variables, lineage_path
from memtrace_otel.llm_client import (
    ChatResult,
    LLMClient,
    LLMError,
    MalformedOutput,
    check_refusal,
    estimate_tokens,
    parse_json_object,
)
from memtrace_otel.semconv import VariableKind

__all__ = [
    "ROOT_CAUSE_RULES",
    "AllAtOnceEngine",
    "FlatLogEngine",
    "LLMEngineBase",
    "evidence_path",
    "parse_error_type",
    "start_variables",
]

_DEFAULT_BUDGET = 20_000
_BUDGET_EXHAUSTED = "token budget exhausted"

ROOT_CAUSE_RULES = """\
A memory system answered a question wrongly. Find the root-cause operation: the EARLIEST \
operation in execution order (opN: smaller N is earlier) that is faulty for its own role AND \
decisive — had it produced a correct output, with earlier operations unchanged and everything \
after it behaving ideally, the answer would have been right.
Error types, by the role of that operation:
- ExtractionError: a message's information was not extracted, or extracted wrongly, into memory.
- UpdateError: an update overwrote or corrupted a memory unit that held the information.
- DeletionError: a deletion removed a memory unit that held the information.
- RetrievalError: memory held the information but retrieval did not return it.
- ResponseError: the retrieved context held the information but the answer is wrong."""

_ONE_PROMPT_FORMAT = """\
Reply with one JSON object only: {"operation": "<opN>", "error_type": "<one of the five>", \
"explanation": "<one or two sentences naming the operation and the lost information>", \
"confidence": <0..1>}"""

def parse_error_type(value: object) -> ErrorType:
    """The error type a model named, forgiving case and spelling (``retrieval_error``).

    >>> parse_error_type("retrieval error").value
    'RetrievalError'
    """
    if isinstance(value, str):
        key = "".join(ch for ch in value.lower() if ch.isalpha()).removesuffix("error")
        for error_type in ErrorType:
            if error_type.value.lower().removesuffix("error") == key:
                return error_type
    raise MalformedOutput(f"unknown error type {str(value)[:40]!r}")


def _clamp(value: object, default: float) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default
    return min(max(number, 0.0), 1.0)


def evidence_path(G: nx.DiGraph, starts: Iterable[str], op: str, answer: str | None) -> list[str]:
    """Variables and operations from an evidence variable through ``op`` to the answer, when linked."""
    path: list[str] = []
    for start in starts:
        try:
            path = lineage_path(G, start, op)
            break
        except MemTraceGraphError:
            continue
    path = path or [op]
    if answer and answer in G:
        with contextlib.suppress(MemTraceGraphError):
            path += lineage_path(G, op, answer)[1:]
    return path


def start_variables(G: nx.DiGraph, case: FailureCase) -> list[str]:
    """The evidence message variables, or the message variables of the answer's backward slice (sorted)."""
    found = sorted(evidence_variables(G, case.evidence))
    if found or not case.answer or case.answer not in G:
        return found
    # A slice is a set: sorted, so that ties later (frontier, best match) fall the same way every run.
    return sorted(n for n in backward_slice(G, case.answer)
                  if G.nodes[n].get("type") == VARIABLE and G.nodes[n].get("kind") == VariableKind.MESSAGE)


class LLMEngineBase(Engine):
    """Shared by the LLM engines: the client, the per-case budget, and model failures as reasons.

    ``_attribute`` raises :class:`LLMError` to fail the case with its reason.

    Parameters
    ----------
    client:
        An :class:`LLMClient`; built from ``client_options`` (``base_url``,
        ``model``, ``api_key``, ``timeout``, ``attempts``, ``retry_delay``) when ``None``.
    token_budget:
        Most prompt + completion tokens, counted from the API's ``usage``, one case may use.
    """

    def __init__(self, *, client: LLMClient | None = None, token_budget: int = _DEFAULT_BUDGET,
                 max_output_tokens: int = 400, **client_options: Any) -> None:
        if token_budget < 1:
            raise ValueError("token_budget must be >= 1")
        if max_output_tokens < 1:
            raise ValueError("max_output_tokens must be >= 1")
        self.client = client if client is not None else LLMClient(**client_options)
        self.token_budget = token_budget
        self.max_output_tokens = max_output_tokens

    def _failure_reason(self, error: Exception) -> str:
        """A failed model call (:class:`LLMError`: timeout, budget, bad output) fails with its reason."""
        return error.reason if isinstance(error, LLMError) else super()._failure_reason(error)

    # -- budget ------------------------------------------------------------
    def _charge(self, result: Attribution, reply: ChatResult) -> None:
        result.input_tokens += reply.input_tokens
        result.output_tokens += reply.output_tokens

    def _fits(self, result: Attribution, payload: Any) -> bool:
        """Whether a request of ``payload`` can still be paid for, its whole answer included."""
        need = estimate_tokens(payload) + self.max_output_tokens
        return result.tokens + need <= self.token_budget


class _OnePromptEngine(LLMEngineBase):
    """Everything in one prompt, one JSON verdict back."""

    def __init__(self, *, max_ops: int = 60, max_chars: int = 160, json_mode: bool = True,
                 **options: Any) -> None:
        super().__init__(**options)
        if max_ops < 1 or max_chars < 8:
            raise ValueError("max_ops must be >= 1 and max_chars >= 8")
        self.max_ops = max_ops
        self.max_chars = max_chars
        self.json_mode = json_mode

    @abc.abstractmethod
    def _render(self, G: nx.DiGraph, case: FailureCase, index: OperationIndex, max_ops: int) -> str:
        """The operations shown to the model."""

    _intro: ClassVar[str] = ""

    def _messages(self, G: nx.DiGraph, case: FailureCase, index: OperationIndex,
                  max_ops: int) -> list[dict[str, Any]]:
        user = (f"{render_case(G, case, index)}\n\n{self._intro}\n{self._render(G, case, index, max_ops)}"
                f"\n\n{_ONE_PROMPT_FORMAT}")
        return [{"role": "system", "content": ROOT_CAUSE_RULES}, {"role": "user", "content": user}]

    def _fitting_messages(self, G: nx.DiGraph, case: FailureCase, result: Attribution,
                          index: OperationIndex) -> list[dict[str, Any]]:
        # Show fewer operations rather than fail: halve until the prompt fits the budget.
        max_ops = self.max_ops
        while True:
            messages = self._messages(G, case, index, max_ops)
            if self._fits(result, messages):
                return messages
            if max_ops <= 2:
                raise LLMError(_BUDGET_EXHAUSTED)
            max_ops //= 2

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        index = OperationIndex(G)
        messages = self._fitting_messages(G, case, result, index)

        def before_call(history: list[dict[str, Any]]) -> None:
            if not self._fits(result, history):
                raise LLMError(_BUDGET_EXHAUSTED)

        def parse(reply: ChatResult) -> dict[str, Any]:
            check_refusal(reply)
            data = parse_json_object(reply.content)
            op = index.resolve(data.get("operation"))
            if op is None or not candidate_operations(G, op):
                raise MalformedOutput(f"unknown operation id {str(data.get('operation'))[:40]!r}")
            data["_node"], data["_type"] = op, parse_error_type(data.get("error_type"))
            return data

        verdict = self.client.chat_parsed(
            messages, parse, max_tokens=self.max_output_tokens, json_mode=self.json_mode,
            on_result=lambda reply: self._charge(result, reply), before_call=before_call,
        )
        result.blame(G, verdict["_node"])
        result.error_type = verdict["_type"]
        result.explanation = str(verdict.get("explanation") or "")[:1000]
        result.confidence = _clamp(verdict.get("confidence"), 0.5)
        result.evidence_path = evidence_path(G, start_variables(G, case), verdict["_node"], case.answer)


class AllAtOnceEngine(_OnePromptEngine):
    """``llm-all-at-once``: the compacted trace (answer's backward slice + evidence write path)."""

    name = "llm-all-at-once"
    _intro = "Trace (operations in execution order; variables are name@version, so ids show lineage):"

    def _render(self, G: nx.DiGraph, case: FailureCase, index: OperationIndex, max_ops: int) -> str:
        return render_compacted_trace(G, case, index, max_ops=max_ops, max_chars=self.max_chars)


class FlatLogEngine(_OnePromptEngine):
    """``flat-log``: a time-ordered operation log without lineage edges."""

    name = "flat-log"
    _intro = "Operation log (execution order):"

    def _render(self, G: nx.DiGraph, case: FailureCase, index: OperationIndex, max_ops: int) -> str:
        return render_flat_log(G, case, index, max_ops=max_ops, max_chars=self.max_chars)


register_engine(AllAtOnceEngine.name, AllAtOnceEngine)
register_engine(FlatLogEngine.name, FlatLogEngine)
