"""Which internal step of a blamed operation went wrong: the model call that lost the information.

A memory operation that called a model has internal ``llm_call`` steps in the graph
(:mod:`memtrace_otel.graph.genai_steps`: prompt -> raw response -> the operation's outputs).
Engines blame operations; once one has, :func:`point_at_step` points the verdict at a step
of it too (``Attribution.step``, ``step_span_id``, ``step_name``), by one rule:

* the **last model call whose prompt held the critical information** (the gold's key tokens,
  :mod:`.presence`): if its raw response no longer holds it, the call lost it (the prompt's
  instructions or the model); if the response still holds it, the parsing after the call lost
  it, and the call is named as the one whose response was mis-read;
* **no prompt held it**: the first call -- its prompt was built without the information the
  operation had;
* **no content to test** (capture off, or no gold): the last call, whose response the
  operation's outputs derive from; the explanation says it was not tested.

Calls that answer with text come first; embeddings calls are considered only when the
operation made no other. An engine that blamed a step itself is re-pointed at the step's
memory operation (the error type then follows that operation's category), with the step kept.
Without steps, nothing changes.
"""

from __future__ import annotations

from typing import Any, Protocol

import networkx as nx

from memtrace_otel.attribution.presence import Information, critical_information, split_lines, tokenize
from memtrace_otel.graph.genai_steps import step_variables, steps_of
from memtrace_otel.semconv import GENAI_GENERATION_OPERATIONS, ErrorType, error_type_of_category

__all__ = ["faulty_step", "point_at_step"]

_GENERATION = frozenset(str(op.value) for op in GENAI_GENERATION_OPERATIONS)
_UNTESTED = ("not tested (no content captured, or no gold): the last model call, whose response the "
             "outputs derive from")


class _Verdict(Protocol):
    """What :func:`point_at_step` needs of an ``Attribution`` (base.py imports this module)."""

    operation: str | None
    error_type: ErrorType | None
    explanation: str
    case: Any
    step: str | None
    step_span_id: str | None
    step_name: str | None

    def blame(self, G: nx.DiGraph, operation: str, error_type: ErrorType | None = None) -> None: ...


def faulty_step(G: nx.DiGraph, operation: str, *, gold: str | None, question: str | None = None
                ) -> tuple[str, str] | None:
    """The internal step of ``operation`` that went wrong, and why (the module's rule).

    Parameters
    ----------
    G:
        An evolution graph.
    operation:
        A memory operation node.
    gold, question:
        What the failed answer should have said, and what was asked.

    Returns
    -------
    tuple or None
        ``(step node, one-line reason)``; ``None`` when ``operation`` has no steps.

    >>> G = nx.DiGraph()
    >>> for name, prompt, response in (("a", "Alice moved to Porto", "Alice moved"), ("b", "x", "y")):
    ...     G.add_edge("op:t:m", f"op:t:{name}", role="step")
    ...     G.add_node(f"op:t:{name}", gen_ai_operation="chat", step_index=ord(name))
    ...     G.add_node(f"p{name}@1", content=prompt); G.add_node(f"r{name}@1", content=response)
    ...     G.add_edge(f"p{name}@1", f"op:t:{name}", role="input")
    ...     G.add_edge(f"op:t:{name}", f"r{name}@1", role="output")
    >>> faulty_step(G, "op:t:m", gold="Porto", question="Where does Alice live?")
    ('op:t:a', 'its prompt held the information and its response does not')
    """
    steps = steps_of(G, operation)
    steps = [s for s in steps if G.nodes[s].get("gen_ai_operation") in _GENERATION] or steps
    if not steps:
        return None
    info = critical_information(gold, question)
    tested = [(s, *_presence(G, s, info)) for s in steps] if info else []
    if not tested or all(p is None and r is None for _, p, r in tested):
        return steps[-1], _UNTESTED
    saw = [item for item in tested if item[1]]
    if not saw:
        return steps[0], "no prompt held the information: the prompt was built without it"
    step, _, kept = saw[-1]
    if kept:
        return step, "its response held the information; the parsing after the call lost it"
    return step, "its prompt held the information and its response does not"


def _presence(G: nx.DiGraph, step: str, info: Information) -> tuple[bool | None, bool | None]:
    """Whether the step's prompt and response carry ``info`` (``None``: no content to tell)."""
    return tuple(_carries(G, v, info) for v in step_variables(G, step))  # type: ignore[return-value]


def _carries(G: nx.DiGraph, variable: str | None, info: Information) -> bool | None:
    content = G.nodes[variable].get("content") if variable is not None else None
    if not isinstance(content, str):
        return None
    return info.carried_by_lines(tokenize(content), [tokenize(line) for line in split_lines(content)])


def point_at_step(G: nx.DiGraph, result: _Verdict) -> None:
    """Point ``result`` at the internal step of its blamed operation that went wrong (in place).

    A verdict on a step itself is moved to the step's memory operation, keeping the step.
    Nothing happens for an operation without steps or an unattributed case.
    """
    op = result.operation
    if op is None or op not in G:
        return
    parent = G.nodes[op].get("parent_operation")
    if isinstance(parent, str) and parent in G:
        kind = error_type_of_category(G.nodes[parent].get("category")) or result.error_type
        result.blame(G, parent, kind)
        _set_step(G, result, op, "the engine blamed this model call of the operation")
        return
    found = faulty_step(G, op, gold=result.case.gold, question=result.case.question)
    if found is not None:
        _set_step(G, result, *found)


def _set_step(G: nx.DiGraph, result: _Verdict, step: str, why: str) -> None:
    data = G.nodes[step]
    result.step, result.step_span_id, result.step_name = step, data.get("span_id"), data.get("name")
    note = f"Inside it, model call {result.step_name!r} (span {result.step_span_id}): {why}."
    result.explanation = f"{result.explanation} {note}".strip()
