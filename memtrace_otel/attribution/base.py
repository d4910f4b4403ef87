"""The engine interface: one failed evaluation in, one root-cause verdict out.

Every engine (offline ``lineage``, the LLM ones, the trivial baselines)
implements :class:`Engine` and is registered by name, so the API, the CLI
(``--engine NAME``) and the benchmark scorer select engines the same way.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import networkx as nx

from memtrace_otel.graph.query import answer_of
from memtrace_otel.semconv import ErrorType

__all__ = [
    "Attribution",
    "Engine",
    "ErrorType",
    "FailureCase",
    "available_engines",
    "create_engine",
    "register_engine",
]


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
    signal: str = "gold"
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
            signal=data.get("signal") or "gold",
            answer=answer_of(G, evaluation),
            case_id=data.get("case"),
        )


@dataclass(slots=True)
class Attribution:
    """An engine's verdict on one :class:`FailureCase`.

    ``operation`` is the root-cause operation node (``op:<trace>:<span>``);
    ``None`` with ``failure_reason`` set when the engine could not attribute
    (malformed model output after retries, budget exhausted ...).
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

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def blame(self, G: nx.DiGraph, operation: str) -> None:
        """Point the verdict at ``operation``, copying its span identity from the graph."""
        data = G.nodes[operation]
        self.operation = operation
        self.trace_id = data.get("trace_id")
        self.span_id = data.get("span_id")
        self.operation_name = data.get("name")
        self.category = data.get("category")

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["error_type"] = self.error_type.value if self.error_type else None
        result["tokens"] = self.tokens
        return result


class Engine(abc.ABC):
    """Finds the root-cause operation of a failed evaluation.

    ``attribute`` must not raise for a bad case: it returns an
    :class:`Attribution` with ``failure_reason`` instead, so a batch goes on.
    Engines hold no per-case state between calls; one engine object may be
    used for many cases in one thread (``memtrace analyze --jobs`` gives each
    process its own).
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def attribute(self, G: nx.DiGraph, case: FailureCase) -> Attribution:
        """The root cause of ``case`` in ``G``."""


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
    _load_builtin_engines()
    try:
        factory = _ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(sorted(_ENGINES))}") from None
    return factory(**options)


def _load_builtin_engines() -> None:
    # Engines register themselves on import; import lazily so that the LLM engines'
    # optional dependency (openai) is only needed when one is asked for.
    import importlib

    for module in ("trivial", "lineage", "llm_agent", "llm_baselines"):
        try:
            importlib.import_module(f"memtrace_otel.attribution.{module}")
        except ModuleNotFoundError as error:
            if error.name != f"memtrace_otel.attribution.{module}":
                raise
