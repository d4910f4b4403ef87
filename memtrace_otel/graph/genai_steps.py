"""GenAI model calls made inside a memory operation, as internal steps of that operation.

An LLM client instrumentation (``opentelemetry-instrumentation-openai-v2`` and the like)
traces each model call as a span of its own; made while a memory operation's span is
current, that span is its descendant. The graph builder hands such spans here
(:class:`GenAICalls`), and :func:`add_genai_steps` turns each one whose nearest
memory-operation ancestor is in the graph into an internal step of that operation:

* a step node ``op:<trace_id>:<span_id>`` (the call's own span): an operation node
  (``type="operation"``) of category ``llm_call`` with ``parent_operation`` (the memory
  operation's node), ``step_index`` (its place among that operation's steps, by start time),
  ``gen_ai_operation`` (``chat``, ``embeddings`` ...), ``model``, ``response_model``,
  ``provider``, ``response_id``, ``input_tokens``, ``output_tokens`` and the span fields every
  operation node has;
* a prompt variable ``llm:<trace_id>:<span_id>:prompt@1`` (kind ``prompt``) it reads and a
  raw-response variable ``llm:<trace_id>:<span_id>:response@1`` (kind ``response``) it writes,
  with the messages' text as content when the call's instrumentation captured it (otherwise no
  content, size 0: the step is there, with its token counts);
* edges: memory operation -> step (``role="step"``), prompt -> step (``role="input"``), step ->
  response (``role="output"``), and, for calls that answer with text (not embeddings), response
  -> each output of the memory operation (``role="derived"``): the parsed facts come from the
  raw response.

So ``prompt -> raw response -> parsed facts`` is in the graph, the memory operation still
writes its outputs (``producer_of`` is unchanged), and a walk over operations tells steps by
``parent_operation`` (:func:`is_step`) to skip or include them on purpose. Spans may arrive in
any order; only parent span ids of one trace are followed (through any spans in between).
Every value read is type-checked: a malformed one is one problem line, the rest is kept.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import networkx as nx

from memtrace_otel.graph.attributes import a_type, number, report, text
from memtrace_otel.graph.index import clear_index
from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.semconv import (
    GENAI_CALL_OPERATIONS,
    GENAI_GENERATION_OPERATIONS,
    Category,
    GenAI,
    GenAIEvent,
    VariableKind,
)
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.wire import content_hash, operation_node_id

__all__ = ["GenAICalls", "add_genai_steps", "is_step", "step_variables", "steps_of"]

_CALLS = frozenset(str(op.value) for op in GENAI_CALL_OPERATIONS)
_GENERATION = frozenset(str(op.value) for op in GENAI_GENERATION_OPERATIONS)
_LLM_CALL = Category.LLM_CALL.value
_PROMPT, _RESPONSE = VariableKind.PROMPT.value, VariableKind.RESPONSE.value
_MAX_DEPTH = 64  # parent hops to a memory operation; a longer (or cyclic) chain is not followed
_MODEL_KEYS = {"model": GenAI.REQUEST_MODEL, "response_model": GenAI.RESPONSE_MODEL,
               "provider": GenAI.PROVIDER_NAME, "response_id": GenAI.RESPONSE_ID}
_TOKEN_KEYS = {"input_tokens": GenAI.USAGE_INPUT_TOKENS, "output_tokens": GenAI.USAGE_OUTPUT_TOKENS}


class GenAICalls:
    """The spans of one build that are not memory operations: model calls, and parent links.

    The builder gives it every span it does not keep as an operation; only model-call
    spans are kept whole, of the others only ``(trace, span) -> parent`` (to reach a
    memory operation through spans in between). Not thread-safe: one per build.
    """

    def __init__(self) -> None:
        self.calls: list[SpanRecord] = []
        self.parents: dict[tuple[str, str], str] = {}
        self.stages: dict[str, list[tuple[int, int, str]]] = {}
        """Operation node -> its stages recorded as events (``graph/stages.py``): start, end, node."""

    def __bool__(self) -> bool:
        return bool(self.calls)

    def add_stage(self, operation: str, start: int, end: int, stage: str) -> None:
        """``stage`` is a stage of ``operation`` recorded as an event: the calls made while it ran are its."""
        self.stages.setdefault(operation, []).append((start, end, stage))

    def stage_at(self, operation: str, time: int) -> str:
        """The stage of ``operation`` running at ``time`` (the latest started), else ``operation``.

        A model call made inside a stage recorded as an event is a child of the operation's span;
        as a child of the stage's span it was the stage's step, so it is the stage's here too.
        """
        running = [(start, stage) for start, end, stage in self.stages.get(operation, ())
                   if start <= time <= end]
        return max(running)[1] if running else operation

    def add(self, span: SpanRecord) -> None:
        if span.parent_span_id:
            self.parents[(span.trace_id, span.span_id)] = span.parent_span_id
        operation = span.attributes.get(GenAI.OPERATION_NAME)
        if isinstance(operation, str) and operation in _CALLS:
            self.calls.append(span)


def is_step(G: nx.DiGraph, node: str) -> bool:
    """Whether ``node`` is an internal step of a memory operation (it has ``parent_operation``).

    >>> G = nx.DiGraph(); G.add_node("op:t:a"); G.add_node("op:t:b", parent_operation="op:t:a")
    >>> is_step(G, "op:t:a"), is_step(G, "op:t:b")
    (False, True)
    """
    return G.nodes[node].get("parent_operation") is not None


def steps_of(G: nx.DiGraph, operation: str) -> list[str]:
    """The internal steps of ``operation``, in the order they ran (empty when it has none).

    >>> G = nx.DiGraph()
    >>> G.add_edge("op:t:a", "op:t:c", role="step"); G.add_edge("op:t:a", "op:t:b", role="step")
    >>> G.nodes["op:t:b"]["step_index"], G.nodes["op:t:c"]["step_index"] = 0, 1
    >>> steps_of(G, "op:t:a")
    ['op:t:b', 'op:t:c']
    """
    found = [s for s, d in G._succ[operation].items() if d.get("role") == "step"]
    return sorted(found, key=lambda s: (G.nodes[s].get("step_index", 0), s))


def step_variables(G: nx.DiGraph, step: str) -> tuple[str | None, str | None]:
    """``(prompt, response)``: the variables a step read and wrote (``None`` when absent).

    >>> G = nx.DiGraph(); G.add_edge("p@1", "op:t:b", role="input")
    >>> G.add_edge("op:t:b", "r@1", role="output")
    >>> step_variables(G, "op:t:b")
    ('p@1', 'r@1')
    """
    prompt = next((v for v, d in G._pred[step].items() if d.get("role") == "input"), None)
    response = next((v for v, d in G._succ[step].items() if d.get("role") == "output"), None)
    return prompt, response


def add_genai_steps(G: nx.DiGraph, calls: GenAICalls, problems: list[Problem] | None = None) -> list[str]:
    """Make each model call of ``calls`` made inside a memory operation of ``G`` a step of it.

    Parameters
    ----------
    G:
        An evolution graph whose memory operations are built (changed in place).
    calls:
        The non-operation spans of the same input (:class:`GenAICalls`).
    problems:
        Where malformed values are reported (``G.graph["problems"]`` by default).

    Returns
    -------
    list of str
        The step nodes added, in execution order. Calls with no memory-operation ancestor
        in ``G`` are left out.

    >>> from memtrace_otel.spans.model import SpanRecord
    >>> G = nx.DiGraph(problems=[])
    >>> G.add_node("op:t:a", type="operation", start=1); G.add_edge("op:t:a", "fact@1", role="output")
    >>> calls = GenAICalls()
    >>> calls.add(SpanRecord("t", "b", "chat m", parent_span_id="a", start_time_unix_nano=2,
    ...                      attributes={"gen_ai.operation.name": "chat"}))
    >>> add_genai_steps(G, calls)
    ['op:t:b']
    >>> sorted(G.successors("llm:t:b:response@1")), G.nodes["op:t:b"]["parent_operation"]
    (['fact@1'], 'op:t:a')
    """
    problems = G.graph.setdefault("problems", []) if problems is None else problems
    added: dict[str, list[str]] = defaultdict(list)
    for span in sorted(calls.calls, key=lambda s: (s.start_time_unix_nano, s.trace_id, s.span_id)):
        node = operation_node_id(span.trace_id, span.span_id)
        parent = _memory_ancestor(G, calls.parents, span)
        if parent is None or node in G:  # outside any memory operation, or a span read twice
            continue
        if calls.stages:
            parent = calls.stage_at(parent, span.start_time_unix_nano)
        _add_step(G, node, parent, span, problems)
        added[parent].append(node)
    for parent, steps in added.items():
        _link_outputs(G, parent, steps)
    return sorted((s for steps in added.values() for s in steps), key=lambda s: G.nodes[s]["start"])


def _memory_ancestor(G: nx.DiGraph, parents: dict[tuple[str, str], str], span: SpanRecord) -> str | None:
    """The nearest memory operation above ``span`` in its trace, through spans in between."""
    trace, current, nodes = span.trace_id, span.parent_span_id, G._node
    for _ in range(_MAX_DEPTH):
        if not current:
            return None
        data = nodes.get(operation_node_id(trace, current))
        if data is not None and data.get("type") == OPERATION and data.get("parent_operation") is None:
            return operation_node_id(trace, current)
        current = parents.get((trace, current), "")
    return None


def _add_step(G: nx.DiGraph, node: str, parent: str, span: SpanRecord, problems: list[Problem]) -> None:
    a = span.attributes
    operation = str(a[GenAI.OPERATION_NAME])
    prompt_text, response_text = _messages(span, problems)
    data: dict[str, Any] = {
        "type": OPERATION, "bipartite": 1, "name": span.name, "span_name": span.name,
        "category": _LLM_CALL, "trace_id": span.trace_id, "span_id": span.span_id,
        "parent_span_id": span.parent_span_id, "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano, "status": span.status_code, "service": span.service_name,
        "outcome": None, "source": span.source, "gen_ai_operation": operation, "store_id": None,
        "content_captured": prompt_text is not None or response_text is not None,
        "parent_operation": parent,
    }
    data.update((field, text(a.get(key), key, span, problems)) for field, key in _MODEL_KEYS.items())
    data.update((field, _count(a.get(key), key, span, problems)) for field, key in _TOKEN_KEYS.items())
    G.add_node(node, **data)
    base = f"llm:{span.trace_id}:{span.span_id}"
    prompt, response = f"{base}:prompt@1", f"{base}:response@1"
    _add_variable(G, prompt, f"{base}:prompt", _PROMPT, prompt_text)
    _add_variable(G, response, f"{base}:response", _RESPONSE, response_text)
    G.add_edge(parent, node, role="step")
    G.add_edge(prompt, node, role="input")
    G.add_edge(node, response, role="output")


def _add_variable(G: nx.DiGraph, variable: str, name: str, kind: str, content: str | None) -> None:
    G.add_node(variable, type=VARIABLE, bipartite=0, name=name, version=1, kind=kind,
               hash=content_hash(content) if content is not None else "",
               size=len(content) if content is not None else 0, content=content, deleted=False)


def _link_outputs(G: nx.DiGraph, parent: str, steps: list[str]) -> None:
    """Number the parent's steps; derive its outputs from the responses of its text-answering calls."""
    every = sorted({*steps, *steps_of(G, parent)}, key=lambda s: (G.nodes[s]["start"], s))
    for index, step in enumerate(every):
        G.nodes[step]["step_index"] = index
    outputs = [v for v, d in G._succ[parent].items() if d.get("role") == "output"]
    for step in steps:
        _, response = step_variables(G, step)
        if response is not None and G.nodes[step]["gen_ai_operation"] in _GENERATION:
            G.add_edges_from((response, output, {"role": "derived"}) for output in outputs)
    clear_index(G)  # node data changed in place: drop the per-graph lookups


def _count(value: Any, key: str, span: SpanRecord, problems: list[Problem]) -> int | None:
    found = number(value, key, span, problems)
    if found is None or type(found) is int:
        return found
    report(problems, span, key, f"is {found!r}, not an integer; ignored")
    return None


# -- messages ---------------------------------------------------------------------------------
# The GenAI messages schema: [{"role": ..., "parts": [{"type": "text", "content": ...}, ...]}].
# Older and other writers put {"role", "content": "..."} (OpenAI's own shape) or, in the
# gen_ai.completion event, the choices [{"message": {...}}]: read those too.


def _messages(span: SpanRecord, problems: list[Problem]) -> tuple[str | None, str | None]:
    """The prompt's and the response's text from the span's attributes, else its older events."""
    a = span.attributes
    prompt = _prompt_text(a, GenAI.INPUT_MESSAGES, span, problems)
    response = _json_text(a.get(GenAI.OUTPUT_MESSAGES), GenAI.OUTPUT_MESSAGES, span, problems,
                          roles=False)
    for event in span.events:
        if prompt is None and event.name == GenAIEvent.CONTENT_PROMPT:
            prompt = _json_text(event.attributes.get(GenAI.PROMPT), GenAI.PROMPT, span, problems, roles=True)
        elif response is None and event.name == GenAIEvent.CONTENT_COMPLETION:
            response = _json_text(event.attributes.get(GenAI.COMPLETION), GenAI.COMPLETION, span, problems,
                                  roles=False)
    return prompt, response


def _prompt_text(a: dict[str, Any], key: str, span: SpanRecord, problems: list[Problem]) -> str | None:
    messages = _json_text(a.get(key), key, span, problems, roles=True)
    instructions = _json_text(a.get(GenAI.SYSTEM_INSTRUCTIONS), GenAI.SYSTEM_INSTRUCTIONS, span, problems,
                              roles=False)
    if instructions is None:
        return messages
    return f"system: {instructions}" + (f"\n{messages}" if messages else "")


def _json_text(value: Any, key: str, span: SpanRecord, problems: list[Problem], *, roles: bool) -> str | None:
    """The text of a messages (or parts) JSON attribute; ``None`` when absent or unreadable."""
    if value is None:
        return None
    if not isinstance(value, str):
        report(problems, span, key, f"is {a_type(value)}, not a JSON string; ignored")
        return None
    try:
        items = json.loads(value)
    except (ValueError, RecursionError) as error:
        report(problems, span, key, f"is not valid JSON ({str(error)[:60]}); ignored")
        return None
    if not isinstance(items, list):
        report(problems, span, key, f"is a JSON {type(items).__name__}, not a list; ignored")
        return None
    lines, bad = [], 0
    for item in items:
        line = _item_text(item, roles=roles)
        if line is None:
            bad += 1
        else:
            lines.append(line)
    if bad:
        report(problems, span, key, f"has {bad} of {len(items)} element(s) that are not messages; "
                                    "those skipped")
    return "\n".join(lines)


def _item_text(item: Any, *, roles: bool) -> str | None:
    """One message (or part, or choice) as text; ``None`` when it has none of the known shapes."""
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("message"), dict):  # an OpenAI choice
        return _item_text(item["message"], roles=roles)
    parts, content = item.get("parts"), item.get("content")
    if isinstance(parts, list):
        body = _parts_text(parts)
    elif "type" in item:  # a bare part (system instructions are a list of parts)
        body = _part_text(item)
    else:  # OpenAI's own shape: {"role", "content": "..."}
        body = content if isinstance(content, str) else None
    if body is None:
        return None
    role = item.get("role")
    return f"{role}: {body}" if roles and isinstance(role, str) else body


def _parts_text(parts: list[Any]) -> str | None:
    texts = [_part_text(part) for part in parts]
    if any(t is None for t in texts):
        return None
    return "\n".join(t for t in texts if t)


def _part_text(part: Any) -> str | None:
    """A part's text: text as is, a tool call or its result briefly, other kinds by their type."""
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        return None
    kind = part["type"]
    if kind == "text":
        return part["content"] if isinstance(part.get("content"), str) else None
    if kind == "tool_call":
        return f"[tool_call {part.get('name')!s}: {_compact(part.get('arguments'))}]"
    if kind == "tool_call_response":
        return f"[tool_call_response: {_compact(part.get('response'))}]"
    return f"[{kind}]"


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):  # parsed from JSON, so only a nesting too deep to write back
        return "(too deeply nested)"
