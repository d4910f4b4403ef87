"""The engine interface: one failed evaluation in, one root-cause verdict out.

Every engine (offline ``lineage``, the LLM ones, the trivial baselines)
implements :class:`Engine` and is registered by name, so the API, the CLI
(``--engine NAME``) and the benchmark scorer select engines the same way.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, final

import networkx as nx

from memtrace_otel.attribution.steps import point_at_step
from memtrace_otel.graph.query import answer_of, missing_lineage
from memtrace_otel.semconv import ErrorType, EvaluationSignal, error_type_of_category

__all__ = [
    "AMBIGUITY_MARGIN",
    "MISSING_TRACES_CONFIDENCE",
    "Attribution",
    "Candidate",
    "Engine",
    "ErrorType",
    "FailureCase",
    "NotAttributed",
    "available_engines",
    "create_engine",
    "register_engine",
]

_logger = logging.getLogger(__name__)
INTERNAL_ERROR = "internal error: "
"""How ``failure_reason`` begins when the engine raised (a bug, not a case it could not decide)."""
MISSING_TRACES_CONFIDENCE = 0.5
"""Factor on an engine's confidence when the case's lineage reaches traces missing from the input."""
AMBIGUITY_MARGIN = 0.15
"""A verdict is ambiguous when the runner-up candidate's confidence is within this of the top one's."""


@dataclass(slots=True)
class FailureCase:
    """One failed evaluation, as read from the graph.

    ``gold`` is the gold answer or the user's correction; with a judge or a
    thumbs-down it may be ``None`` (see ``signal``), which degrades attribution.
    """

    evaluation: str
    question: str | None = None
    prediction: str | None = None
    gold: str | None = None
    explanation: str | None = None
    evidence: list[str] = field(default_factory=list)
    signal: str = EvaluationSignal.GOLD
    answer: str | None = None
    case_id: str | None = None

    @classmethod
    def from_graph(cls, G: nx.DiGraph, evaluation: str) -> FailureCase:
        """The failure recorded by evaluation operation ``evaluation`` of ``G``."""
        data = G.nodes[evaluation]
        return cls(
            evaluation=evaluation,
            question=data.get("question"),
            prediction=data.get("prediction"),
            gold=data.get("gold"),
            explanation=data.get("explanation"),
            evidence=list(data.get("evidence") or ()),
            signal=data.get("signal") or EvaluationSignal.GOLD,
            answer=answer_of(G, evaluation),
            case_id=data.get("case"),
        )


@dataclass(slots=True)
class Candidate:
    """One possible root cause of a failure, ranked among others by ``confidence`` (0..1).

    ``reason`` says in one line what points at it.
    """

    operation: str
    span_id: str | None
    error_type: ErrorType | None
    confidence: float
    reason: str = ""
    operation_name: str | None = None

    @classmethod
    def of(cls, G: nx.DiGraph, operation: str, error_type: ErrorType | None, confidence: float,
           reason: str = "") -> Candidate:
        """The candidate ``operation`` of ``G`` (error type from its category when ``None``)."""
        data = G.nodes[operation]
        kind = error_type or error_type_of_category(data.get("category"))
        return cls(operation, data.get("span_id"), kind, round(confidence, 3), reason, data.get("name"))

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["error_type"] = self.error_type.value if self.error_type else None
        return result


@dataclass(slots=True)
class Attribution:
    """An engine's verdict on one :class:`FailureCase`.

    ``operation`` is the root-cause operation node (``op:<trace>:<span>``);
    ``None`` with ``failure_reason`` set when the engine could not attribute
    (malformed model output after retries, budget exhausted ...).
    ``missing_traces`` (sorted trace ids) names the traces the case's lineage
    links to but the input does not hold; see :meth:`Engine.attribute` for what
    that does to ``confidence``.
    ``candidates`` ranks the possible root causes, best first (the verdict is the
    first); engines that weigh no alternatives give a one-element list. ``ambiguous``
    says the evidence does not separate the first candidates (see
    :data:`AMBIGUITY_MARGIN`): read the list, not only the verdict.
    """

    engine: str
    case: FailureCase
    operation: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    operation_name: str | None = None
    category: str | None = None
    error_type: ErrorType | None = None
    explanation: str = ""
    evidence_path: list[str] = field(default_factory=list)
    confidence: float = 0.0
    seconds: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    failure_reason: str | None = None
    missing_traces: list[str] = field(default_factory=list)
    step: str | None = None
    """The internal step (a model call, ``llm_call`` node) of ``operation`` that went wrong, when it
    has steps (:func:`~memtrace_otel.attribution.steps.point_at_step` says which and why)."""
    step_span_id: str | None = None
    step_name: str | None = None
    candidates: list[Candidate] = field(default_factory=list)
    ambiguous: bool = False

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def blame(self, G: nx.DiGraph, operation: str, error_type: ErrorType | None = None) -> None:
        """Point the verdict at ``operation``, copying its span identity from the graph.

        ``error_type`` defaults to the one the operation's category stands for
        (:data:`~memtrace_otel.semconv.CATEGORY_ERROR_TYPE`).
        """
        data = G.nodes[operation]
        self.operation = operation
        self.trace_id = data.get("trace_id")
        self.span_id = data.get("span_id")
        self.operation_name = data.get("name")
        self.category = data.get("category")
        self.error_type = error_type or error_type_of_category(self.category)

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["error_type"] = self.error_type.value if self.error_type else None
        result["tokens"] = self.tokens
        result["candidates"] = [c.to_dict() for c in self.candidates]
        return result


class NotAttributed(Exception):
    """Raised by :meth:`Engine._attribute` when the case cannot be attributed; ``reason`` is one line.

    The engine's :meth:`~Engine.attribute` turns it into ``Attribution.failure_reason``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Engine(abc.ABC):
    """Finds the root-cause operation of a failed evaluation.

    Subclasses implement one method, :meth:`_attribute`, which fills in the
    verdict. :meth:`attribute` owns what every engine shares: it times the
    case, and it never raises for a bad case -- :class:`NotAttributed` and any
    other exception become an :class:`Attribution` with ``failure_reason`` set
    (and no verdict), so a batch goes on. Engines with their own failure
    vocabulary map exceptions to reasons in :meth:`_failure_reason`.

    Thread safety: engines hold no per-case state between calls; one engine
    object may be used for many cases in one thread (``memtrace analyze --jobs``
    gives each process its own).
    """

    name: ClassVar[str]

    @final
    def attribute(self, G: nx.DiGraph, case: FailureCase) -> Attribution:
        """The root cause of ``case`` in ``G``; never raises (``failure_reason`` says why not).

        Parameters
        ----------
        G:
            The memory evolution graph (:func:`~memtrace_otel.graph.build_graph`).
        case:
            One failed evaluation of ``G`` (:meth:`FailureCase.from_graph`).

        Returns
        -------
        Attribution
            The verdict, with ``seconds`` the time it took; on failure
            ``operation`` is ``None``, ``failure_reason`` one line, and the
            tokens already spent are kept.

        When the case's lineage links to traces the input does not hold
        (:func:`~memtrace_otel.graph.query.missing_lineage`: typically the
        ingestion traces that wrote the memory a question read), they are named
        in ``missing_traces`` and the explanation, and ``confidence`` is halved
        (:data:`MISSING_TRACES_CONFIDENCE`): the missing part is the write side
        (extraction, update, deletion), where about half of the benchmark's root
        causes lie, and which an engine cannot blame when it cannot see it; so a
        verdict reached without it is right at best about half as often.
        """
        started = time.perf_counter()
        result = Attribution(engine=self.name, case=case)
        try:
            self._attribute(G, case, result)
        except Exception as error:  # the never-raise contract: one bad case must not stop a batch
            result = _not_attributed(result, self._failure_reason(error))
        _point_at_step(G, result)
        _default_candidates(G, result)
        _note_missing_traces(G, result)
        result.seconds = time.perf_counter() - started
        return result

    @abc.abstractmethod
    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        """Fill ``result`` with the verdict on ``case``; raise :class:`NotAttributed` to give up."""

    def _failure_reason(self, error: Exception) -> str:
        """The one-line ``failure_reason`` for an exception :meth:`_attribute` raised.

        Engines override this to name their own failures (the LLM engines map
        ``LLMError`` to its reason) and defer to it for the rest.
        """
        if isinstance(error, NotAttributed):
            return error.reason
        # Each case at DEBUG (with its traceback); a run says it once (runner.attribute_failures).
        _logger.debug("engine %s failed on a case: %s: %s", self.name, type(error).__name__, error,
                      exc_info=True)
        return f"{INTERNAL_ERROR}{type(error).__name__}: {error}"


def _default_candidates(G: nx.DiGraph, result: Attribution) -> None:
    # An engine that weighs no alternatives has one candidate: its verdict.
    if result.candidates or result.operation is None or result.operation not in G:
        return
    result.candidates = [Candidate.of(G, result.operation, result.error_type, result.confidence,
                                      result.explanation)]


def _point_at_step(G: nx.DiGraph, result: Attribution) -> None:
    try:
        point_at_step(G, result)
    except Exception as error:  # locating a step must not break the never-raise contract
        _logger.warning("could not locate the faulty step of %s: %s", result.operation, error)


def _note_missing_traces(G: nx.DiGraph, result: Attribution) -> None:
    evaluation = result.case.evaluation
    try:
        missing = sorted(missing_lineage(G, evaluation)) if evaluation in G else []
    except Exception as error:  # a graph query must not break the never-raise contract
        _logger.warning("could not check the lineage of %s for missing traces: %s", evaluation, error)
        return
    if not missing:
        return
    result.missing_traces = missing
    result.confidence = round(result.confidence * MISSING_TRACES_CONFIDENCE, 3)
    for candidate in result.candidates:
        candidate.confidence = round(candidate.confidence * MISSING_TRACES_CONFIDENCE, 3)
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    note = (f"Its lineage links to {len(missing)} trace(s) not in the input ({shown}): what happened "
            f"to the memory there is unseen, so the verdict may be wrong.")
    result.explanation = f"{result.explanation} {note}".strip()


def _not_attributed(partial: Attribution, reason: str) -> Attribution:
    # A half-filled verdict is not a verdict: keep only what was spent on the case.
    return Attribution(engine=partial.engine, case=partial.case, input_tokens=partial.input_tokens,
                       output_tokens=partial.output_tokens, failure_reason=reason)


_ENGINES: dict[str, Callable[..., Engine]] = {}


def register_engine(name: str, factory: Callable[..., Engine]) -> None:
    """Make ``factory(**options)`` available as engine ``name``."""
    _ENGINES[name] = factory


def available_engines() -> list[str]:
    """Names of the registered engines."""
    _load_builtin_engines()
    return sorted(_ENGINES)


def create_engine(name: str, **options: Any) -> Engine:
    """A new engine by name; ``ValueError`` names the choices when ``name`` is unknown."""
    _load_builtin_engines(until=name)
    try:
        factory = _ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(sorted(_ENGINES))}") from None
    return factory(**options)


def _load_builtin_engines(until: str | None = None) -> None:
    # Engines register themselves on import; import lazily so that the LLM engines'
    # optional dependency (openai) is only needed when one is asked for. With ``until``, the
    # modules after the one registering that engine are not imported: a run of ``lineage`` does
    # not pay for the LLM engines' modules at start-up (a fixed cost of every command).
    import importlib

    for module in ("trivial", "lineage", "llm_agent", "llm_baselines"):
        if until is not None and until in _ENGINES:
            return
        try:
            importlib.import_module(f"memtrace_otel.attribution.{module}")
        except ModuleNotFoundError as error:
            if error.name != f"memtrace_otel.attribution.{module}":
                raise
