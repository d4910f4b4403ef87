"""Text renderings of the evolution graph for LLM prompts.

Why a module of its own: all three LLM engines must show the model the same
facts in the same words, so that token counts compare engines rather than
formatting. Every content is truncated (prompts have budgets) and operations
get short aliases (``op12``, from the execution order) instead of
``op:<trace>:<span>`` node keys, which cost ~20 tokens each; the alias, the
node key and the bare span id all resolve back with :class:`OperationIndex`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import networkx as nx

from memtrace_otel.attribution.base import FailureCase
from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.graph.query import (
    backward_slice,
    evidence_variables,
    memory_life,
    producer_of,
)
from memtrace_otel.semconv import Category, VariableKind

__all__ = [
    "OperationIndex",
    "candidate_operations",
    "render_case",
    "render_compacted_trace",
    "render_flat_log",
    "render_memory_life",
    "render_operation",
    "render_variable",
    "truncate",
]

_DEFAULT_CHARS = 240
_DEFAULT_VARS = 6
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset({
    "a", "an", "the", "of", "to", "in", "on", "at", "is", "was", "were", "be", "did", "do",
    "does", "what", "when", "who", "where", "how", "which", "and", "or", "for", "with", "by",
    "from", "that", "this", "it", "as", "has", "have", "had", "i", "you", "he", "she", "they"
})
_WRITE_PATH = frozenset({Category.INGEST, Category.EXTRACTION, Category.UPDATE, Category.DELETION})


def truncate(text: str | None, limit: int = _DEFAULT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, marking the cut; ``None`` says content was not captured.

    >>> truncate("abcdefgh", 5)
    'abcd…'
    >>> truncate(None)
    '(content not captured)'
    """
    if text is None:
        return "(content not captured)"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


class OperationIndex:
    """Aliases of the operations of one graph, both ways.

    >>> G = nx.DiGraph()
    >>> G.add_node("op:t:ab12", type="operation", order=3, span_id="ab12")
    >>> index = OperationIndex(G)
    >>> index.alias("op:t:ab12"), index.resolve("op3"), index.resolve("ab12"), index.resolve("op9")
    ('op3', 'op:t:ab12', 'op:t:ab12', None)
    """

    def __init__(self, G: nx.DiGraph) -> None:
        self._by_ref: dict[str, str] = {}
        self._alias: dict[str, str] = {}
        for node, data in G.nodes(data=True):
            if data.get("type") != OPERATION:
                continue
            alias = f"op{data.get('order', 0)}"
            self._alias[node] = alias
            self._by_ref[alias] = node
            self._by_ref[node] = node
            span_id = data.get("span_id")
            if isinstance(span_id, str) and span_id:
                self._by_ref.setdefault(span_id, node)

    def alias(self, node: str) -> str:
        return self._alias.get(node, node)

    def resolve(self, ref: object) -> str | None:
        """The node a model's reference names, or ``None`` if it names none."""
        if not isinstance(ref, str):
            return None
        ref = ref.strip().strip("`'\"")
        return self._by_ref.get(ref) or self._by_ref.get(ref.lower())


def render_variable(G: nx.DiGraph, variable: str, *, max_chars: int = _DEFAULT_CHARS) -> str:
    """One line: id, kind, content.

    >>> G = nx.DiGraph(); G.add_node("m@1", kind="memory_unit", content="Alice moved to Paris")
    >>> render_variable(G, "m@1")
    'm@1 [memory_unit]: "Alice moved to Paris"'
    """
    data = G.nodes[variable]
    kind = data.get("kind", VariableKind.OTHER)
    if data.get("deleted"):
        return f"{variable} [{kind}]: (deleted)"
    return f"{variable} [{kind}]: \"{truncate(data.get('content'), max_chars)}\""


def _side(
    G: nx.DiGraph, variables: list[str], label: str, *, focus: set[str], max_vars: int,
    max_chars: int, ids: bool,
) -> list[str]:
    # The focus variables first: a retrieval reading 500 units must still show the one asked about.
    ordered = sorted(variables, key=lambda v: (v not in focus, G.nodes[v].get("version", 0), v))
    lines = []
    for variable in ordered[:max_vars]:
        if ids:
            lines.append(f"  {label} {render_variable(G, variable, max_chars=max_chars)}")
        else:
            lines.append(f"  {label.strip()}: \"{truncate(G.nodes[variable].get('content'), max_chars)}\"")
    if len(ordered) > max_vars:
        lines.append(f"  {label} … {len(ordered) - max_vars} more")
    return lines


def _header(G: nx.DiGraph, op: str, index: OperationIndex) -> str:
    data = G.nodes[op]
    extra = []
    if data.get("outcome"):
        extra.append(f"outcome={data['outcome']}")
    if data.get("status") not in (None, "UNSET", "OK", "", 0, 1):
        extra.append(f"status={data['status']}")
    tail = f" ({', '.join(extra)})" if extra else ""
    return f"{index.alias(op)} {data.get('category', Category.OTHER)} \"{data.get('name', '')}\"{tail}"


def render_operation(
    G: nx.DiGraph,
    op: str,
    index: OperationIndex,
    *,
    focus: Iterable[str] = (),
    max_vars: int = _DEFAULT_VARS,
    max_chars: int = _DEFAULT_CHARS,
    ids: bool = True,
) -> str:
    """An operation with what it read and wrote; ``ids=False`` hides variable ids (no edges)."""
    wanted = set(focus)
    inputs = [v for v in G.predecessors(op) if G.nodes[v].get("type") == VARIABLE]
    outputs = [v for v in G.successors(op) if G.nodes[v].get("type") == VARIABLE]
    lines = [_header(G, op, index)]
    for side, variables in (("in ", inputs), ("out", outputs)):
        lines += _side(G, variables, side, focus=wanted, max_vars=max_vars, max_chars=max_chars, ids=ids) \
            if variables else [f"  {side} (nothing)"]
    return "\n".join(lines)


def render_memory_life(
    G: nx.DiGraph, name: str, index: OperationIndex, *, max_chars: int = _DEFAULT_CHARS
) -> str:
    """Every version of one variable with its writer and readers: its whole life."""
    lines = [f"life of {name}:"]
    for version in memory_life(G, name):
        writer = index.alias(version["written_by"]) if version["written_by"] else "(external)"
        readers = ", ".join(index.alias(r) for r in version["read_by"][:8]) or "nobody"
        if len(version["read_by"]) > 8:
            readers += f", … {len(version['read_by']) - 8} more"
        lines.append(f"  {render_variable(G, version['id'], max_chars=max_chars)}")
        lines.append(f"    written by {writer}; read by {readers}")
    return "\n".join(lines)


def render_case(G: nx.DiGraph, case: FailureCase, index: OperationIndex) -> str:
    """The failed evaluation: question, gold, prediction, evidence ids, answer variable."""
    lines = [
        f"Question: {truncate(case.question, 400) if case.question else '(unknown)'}",
        f"Gold answer: {truncate(case.gold, 400) if case.gold else '(unknown; signal ' + case.signal + ')'}",
        f"Prediction: {truncate(case.prediction, 400) if case.prediction else '(unknown)'}",
    ]
    if case.explanation:
        lines.append(f"Evaluator's note: {truncate(case.explanation, 300)}")
    if case.evidence:
        lines.append(f"Evidence message ids: {', '.join(case.evidence)}")
    if case.answer and case.answer in G:
        producer = producer_of(G, case.answer)
        made_by = f" (written by {index.alias(producer)})" if producer else ""
        lines.append(f"Answer variable: {case.answer}{made_by}")
    return "\n".join(lines)


def candidate_operations(G: nx.DiGraph, op: str) -> bool:
    """Whether ``op`` can be a root cause (evaluations judge; they do not cause)."""
    data = G.nodes[op]
    return data.get("type") == OPERATION and data.get("category") != Category.EVALUATION


def _terms(text: str | None) -> set[str]:
    return {w for w in _WORD.findall((text or "").lower()) if w not in _STOP}


def _write_path(G: nx.DiGraph, starts: Iterable[str], before: int) -> set[str]:
    found: set[str] = set()
    for start in starts:
        for node in nx.descendants(G, start):
            data = G.nodes[node]
            if data.get("category") in _WRITE_PATH and data.get("order", 0) < before:
                found.add(node)
    return found


def _eval_order(G: nx.DiGraph, case: FailureCase) -> int:
    if case.evaluation in G:
        return int(G.nodes[case.evaluation].get("order", 0))
    return max((d.get("order", 0) for _, d in G.nodes(data=True)), default=0) + 1


def _render_ops(G: nx.DiGraph, ops: Sequence[str], index: OperationIndex, **options: object) -> str:
    ordered = sorted(ops, key=lambda n: G.nodes[n].get("order", 0))
    return "\n".join(render_operation(G, op, index, **options) for op in ordered)  # type: ignore[arg-type]


def render_compacted_trace(
    G: nx.DiGraph, case: FailureCase, index: OperationIndex, *, max_ops: int = 60,
    max_chars: int = 160, max_vars: int = 4,
) -> str:
    """The answer's backward slice plus the write path of the evidence, in execution order.

    Over ``max_ops`` operations, the evidence write path is kept first, then
    the read path nearest the answer (a whole ingestion history rarely fits).
    """
    before = _eval_order(G, case)
    read_path = set()
    if case.answer and case.answer in G:
        read_path = {n for n in backward_slice(G, case.answer)
                     if G.nodes[n].get("type") == OPERATION and candidate_operations(G, n)}
    write_path = _write_path(G, evidence_variables(G, case.evidence), before)
    ranked = sorted(write_path, key=lambda n: G.nodes[n]["order"])
    ranked += sorted(read_path - write_path, key=lambda n: -G.nodes[n]["order"])
    chosen = ranked[:max_ops]
    dropped = len(ranked) - len(chosen)
    text = _render_ops(G, chosen, index, max_chars=max_chars, max_vars=max_vars, ids=True)
    return text + (f"\n(… {dropped} more operations not shown)" if dropped else "")


def render_flat_log(
    G: nx.DiGraph, case: FailureCase, index: OperationIndex, *, max_ops: int = 60,
    max_chars: int = 160, max_vars: int = 4,
) -> str:
    """A time-ordered log of operations before the evaluation, without variable ids (no edges).

    Over ``max_ops`` operations, the operations of the answer's own trace are
    kept and the rest are those whose contents share most words with the
    question and gold answer — the keyword search a person would do on a log.
    """
    before = _eval_order(G, case)
    ops = [n for n, d in G.nodes(data=True) if d.get("type") == OPERATION
           and candidate_operations(G, n) and d.get("order", 0) < before]
    answer_trace = None
    if case.answer and case.answer in G and (producer := producer_of(G, case.answer)):
        answer_trace = G.nodes[producer].get("trace_id")
    if len(ops) > max_ops:
        wanted = _terms(case.question) | _terms(case.gold)

        def overlap(op: str) -> tuple[bool, int]:
            words: set[str] = set()
            for v in (*G.predecessors(op), *G.successors(op)):
                words |= _terms(G.nodes[v].get("content"))
            return G.nodes[op].get("trace_id") == answer_trace, len(words & wanted)

        ops = sorted(ops, key=overlap, reverse=True)[:max_ops]
    return _render_ops(G, ops, index, max_chars=max_chars, max_vars=max_vars, ids=False)
