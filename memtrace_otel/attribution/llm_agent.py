"""``llm-agent``: the MemTrace approach — an LLM walks the lineage from the evidence, one variable at a time.

Why an agent rather than one prompt: a whole memory history does not fit a
prompt, and a model shown everything at once blames the last visible step.
The agent starts from the evidence (the evidence message variables, or the
messages of the answer's backward slice that best match the question and
gold), keeps a bounded frontier of variables ordered by creation time, and
asks the model to expand one variable at a time: expanding renders the
operations that wrote and read it (and, for a memory unit, its whole life:
every version, the update or deletion that ended it, who read it), and the
model judges each operation locally. A ``RetrievalError`` verdict is refused
once while memory units on the explored lineage have not had their life
shown — a unit overwritten or deleted downstream is an update/deletion
fault, not a retrieval one. The model stops with ``final_answer``.

Conversation shape (bounded, so cost grows with steps, not quadratically):
system rules, the case, the last ``history_turns`` tool exchanges, and a
state message (frontier, verdicts so far, problems with the last reply).

Cost and failure: every request is checked against the case's token budget
(estimated before, counted from ``usage`` after); when it runs out the
earliest operation judged faulty is returned, or ``failure_reason`` =
"token budget exhausted". Malformed replies (bad JSON, unknown ids, no tool
call, refusals) are told to the model and retried up to ``max_malformed``
times in a row, then the case fails with the reason. Never raises.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from memtrace_otel.attribution.base import Attribution, ErrorType, FailureCase, register_engine
from memtrace_otel.attribution.llm_baselines import (
    ROOT_CAUSE_RULES,
    LLMEngineBase,
    evidence_path,
    parse_error_type,
    start_variables,
)
from memtrace_otel.attribution.render import (
    OperationIndex,
    candidate_operations,
    render_case,
    render_memory_life,
    render_operation,
    truncate,
)
from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.graph.query import backward_slice, producer_of
from memtrace_otel.llm_client import ChatResult, LLMError, MalformedOutput, parse_json_object
from memtrace_otel.semconv import Category, VariableKind

__all__ = ["AGENT_TOOLS", "LLMAgentEngine"]

_BUDGET_EXHAUSTED = "token budget exhausted"
_WORD = re.compile(r"[a-z0-9]+")
_WRITE_PATH = frozenset({Category.INGEST, Category.EXTRACTION, Category.UPDATE, Category.DELETION})
_QUERY_SIDE = frozenset({VariableKind.QUERY, VariableKind.CONTEXT, VariableKind.ANSWER})
_MEMORY_KINDS = frozenset({VariableKind.MEMORY_UNIT, VariableKind.STORE})

AGENT_RULES = ROOT_CAUSE_RULES + """
You investigate with tools. expand(variable_id) shows the operations that wrote and read a \
variable (for a memory unit, its whole life). Expand frontier variables earliest first, follow \
the information downstream, judge_operation each operation you have seen (faulty means it \
mishandled the information for its own role), and call final_answer with the earliest faulty, \
decisive operation. Before blaming retrieval, follow the memory units through their whole life."""

AGENT_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "expand", "description": "Show the operations that wrote and read a variable.",
        "parameters": {"type": "object", "properties": {"variable_id": {"type": "string"}},
                       "required": ["variable_id"]}}},
    {"type": "function", "function": {
        "name": "judge_operation", "description": "Record whether one operation is locally faulty.",
        "parameters": {"type": "object", "properties": {
            "op_id": {"type": "string"}, "faulty": {"type": "boolean"}, "reason": {"type": "string"}},
            "required": ["op_id", "faulty", "reason"]}}},
    {"type": "function", "function": {
        "name": "final_answer", "description": "Name the root-cause operation and stop.",
        "parameters": {"type": "object", "properties": {
            "op_id": {"type": "string"},
            "error_type": {"type": "string", "enum": [e.value for e in ErrorType]},
            "explanation": {"type": "string"}, "confidence": {"type": "number"}},
            "required": ["op_id", "error_type", "explanation"]}}},
]


@dataclass
class _Walk:
    """The agent's state for one case (never shared between cases)."""

    G: nx.DiGraph
    case: FailureCase
    index: OperationIndex
    ancestry: set[str]
    before: int
    frontier: list[str] = field(default_factory=list)
    expanded: list[str] = field(default_factory=list)
    seen: dict[str, None] = field(default_factory=dict)
    verdicts: dict[str, tuple[bool, str]] = field(default_factory=dict)
    lives: set[str] = field(default_factory=set)
    units: set[str] = field(default_factory=set)
    guard_used: bool = False
    query_side: bool = False
    notes: list[str] = field(default_factory=list)
    final: dict[str, Any] | None = None

    def created(self, variable: str) -> tuple[int, str]:
        producer = producer_of(self.G, variable)
        return (self.G.nodes[producer].get("order", 0) if producer else -1, variable)

    def push(self, variables: list[str], limit: int) -> None:
        """Add to the frontier; over ``limit``, keep the answer's ancestry, then the earliest."""
        pool = {v for v in (*self.frontier, *variables) if v not in self.expanded}
        if not pool and not self.query_side:
            # The evidence's lineage ended without reaching the answer (e.g. the unit holding it
            # was never retrieved): go on from the answer's query side (query, context, answer).
            self.query_side = True
            pool = {v for v in self.ancestry if v not in self.expanded
                    and self.G.nodes[v].get("kind") in _QUERY_SIDE}
        ranked = sorted(pool, key=lambda v: (v not in self.ancestry, self.created(v)))[:limit]
        self.frontier = sorted(ranked, key=self.created)

    def best_candidate(self) -> str | None:
        faulty = [op for op, (bad, _) in self.verdicts.items() if bad]
        return min(faulty, key=lambda op: (self.G.nodes[op].get("order", 0), op)) if faulty else None


class LLMAgentEngine(LLMEngineBase):
    """The MemTrace-style agent; see the module docstring.

    Parameters (besides :class:`LLMEngineBase`'s)
    ----------
    max_steps:
        Most model calls per case.
    max_frontier:
        Most variables waiting on the frontier.
    max_readers:
        Most reading operations shown per expansion.
    max_malformed:
        Malformed replies in a row before the case fails.
    history_turns:
        Tool exchanges kept in the conversation.
    """

    name = "llm-agent"

    def __init__(self, *, max_steps: int = 24, max_frontier: int = 8, max_readers: int = 6,
                 max_malformed: int = 3, history_turns: int = 2, max_chars: int = 200,
                 **options: Any) -> None:
        super().__init__(**options)
        if min(max_steps, max_frontier, max_readers, max_malformed, history_turns) < 1:
            raise ValueError(
                "max_steps, max_frontier, max_readers, max_malformed and history_turns must be >= 1"
            )
        self.max_steps = max_steps
        self.max_frontier = max_frontier
        self.max_readers = max_readers
        self.max_malformed = max_malformed
        self.history_turns = history_turns
        self.max_chars = max_chars

    # -- the loop ------------------------------------------------------------
    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        walk = self._start(G, case)
        intro = {"role": "user", "content": render_case(G, case, walk.index)}
        exchanges: deque[list[dict[str, Any]]] = deque(maxlen=self.history_turns)
        malformed = 0
        for _ in range(self.max_steps):
            messages = [{"role": "system", "content": AGENT_RULES}, intro,
                        *(m for turn in exchanges for m in turn), self._state(walk)]
            if not self._fits(result, [messages, AGENT_TOOLS]):
                return self._stop(walk, result, _BUDGET_EXHAUSTED)
            reply = self.client.chat(messages, tools=AGENT_TOOLS, max_tokens=self.max_output_tokens)
            self._charge(result, reply)
            walk.notes.clear()
            turn, ok = self._dispatch(walk, reply)
            if turn:
                exchanges.append(turn)
            malformed = 0 if ok else malformed + 1
            if walk.final is not None:
                return self._finish(walk, result)
            if result.tokens > self.token_budget:
                return self._stop(walk, result, _BUDGET_EXHAUSTED)
            if malformed >= self.max_malformed:
                raise LLMError(f"malformed model output after {malformed} attempts: {walk.notes[-1]}")
        return self._stop(walk, result, f"step limit ({self.max_steps}) reached")

    def _start(self, G: nx.DiGraph, case: FailureCase) -> _Walk:
        ancestry: set[str] = set()
        if case.answer and case.answer in G:
            ancestry = set(backward_slice(G, case.answer))
        before = G.nodes[case.evaluation].get("order", 0) if case.evaluation in G else 1 << 62
        walk = _Walk(G, case, OperationIndex(G), ancestry, before)
        starts = start_variables(G, case)
        if not case.evidence and len(starts) > self.max_frontier:
            starts = _best_matching(G, starts, f"{case.question or ''} {case.gold or ''}", self.max_frontier)
        if not starts and case.answer and case.answer in G:
            starts = [case.answer]
        walk.push(starts, self.max_frontier)
        return walk

    def _state(self, walk: _Walk) -> dict[str, Any]:
        alias = walk.index.alias
        unjudged = [alias(op) for op in walk.seen if op not in walk.verdicts]
        judged = [f"{alias(op)} {'FAULTY' if bad else 'ok'} ({truncate(why, 80)})"
                  for op, (bad, why) in walk.verdicts.items()]
        lines = [
            "State:",
            f"Frontier (expand next, earliest first): {', '.join(walk.frontier) or '(empty)'}",
            f"Expanded: {', '.join(walk.expanded) or '(none)'}",
            f"Operations seen, not yet judged: {', '.join(unjudged) or '(none)'}",
            f"Judged: {'; '.join(judged) or '(none)'}",
        ]
        lines += [f"Problem with your last reply: {note}" for note in walk.notes]
        lines.append("Call a tool: expand, judge_operation or final_answer.")
        return {"role": "user", "content": "\n".join(lines)}

    # -- one reply -----------------------------------------------------------
    def _dispatch(self, walk: _Walk, reply: ChatResult) -> tuple[list[dict[str, Any]], bool]:
        """Run the reply's tool calls; the messages to keep, and whether the reply was well formed."""
        if reply.refusal or reply.finish_reason == "content_filter":
            walk.notes.append(f"the model refused: {truncate(reply.refusal or 'content filter', 100)}")
            return [], False
        if not reply.tool_calls:
            return [], self._content_answer(walk, reply.content)
        ok, tool_messages = True, []
        for call in reply.tool_calls:
            try:
                output = self._tool(walk, call.name, _arguments(call.arguments))
            except MalformedOutput as error:
                ok, output = False, f"error: {error}"
                walk.notes.append(f"{call.name}: {error}")
            tool_messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
            if walk.final is not None:
                break
        answered = {m["tool_call_id"] for m in tool_messages}
        tool_messages += [{"role": "tool", "tool_call_id": c.id, "content": "skipped: answer given"}
                          for c in reply.tool_calls if c.id not in answered]
        return [reply.assistant_message(), *tool_messages], ok

    def _content_answer(self, walk: _Walk, content: str | None) -> bool:
        # Models without tool calling may answer final_answer's JSON in plain text.
        try:
            data = parse_json_object(content)
            if "op_id" not in data and "operation" in data:
                data["op_id"] = data["operation"]
            self._final(walk, data)
            return True
        except MalformedOutput as error:
            walk.notes.append(f"no tool call ({error}); call one of the tools")
            return False

    def _tool(self, walk: _Walk, name: str, args: dict[str, Any]) -> str:
        if name == "expand":
            return self._expand(walk, args.get("variable_id"))
        if name == "judge_operation":
            return self._judge(walk, args)
        if name == "final_answer":
            return self._final(walk, args)
        raise MalformedOutput(f"unknown tool {name[:40]!r}")

    # -- tools ---------------------------------------------------------------
    def _expand(self, walk: _Walk, variable: object) -> str:
        G = walk.G
        if not isinstance(variable, str) or variable not in G or G.nodes[variable].get("type") != VARIABLE:
            raise MalformedOutput(f"unknown variable id {str(variable)[:60]!r}")
        producer = producer_of(G, variable)
        readers = sorted(
            (op for op in G.successors(variable) if self._relevant(walk, op)),
            key=lambda op: (op not in walk.ancestry, G.nodes[op].get("order", 0)),
        )[: self.max_readers]
        ops = [op for op in ([producer] if producer else []) + readers if candidate_operations(G, op)]
        parts = [render_operation(G, op, walk.index, focus=[variable], max_chars=self.max_chars)
                 for op in dict.fromkeys(ops)]
        parts += self._life(walk, variable)
        walk.seen.update(dict.fromkeys(ops))
        if variable in walk.frontier:
            walk.frontier.remove(variable)
        if variable not in walk.expanded:
            walk.expanded.append(variable)
        downstream = [v for op in readers for v in G.successors(op) if self._worth_following(walk, v)]
        later = [v for v in G.successors(variable) if G.nodes[v].get("type") == VARIABLE]
        walk.push(downstream + later, self.max_frontier)
        self._note_units(walk, ops)
        return "\n".join(parts) or f"{variable}: no operation wrote or read it"

    @staticmethod
    def _relevant(walk: _Walk, op: str) -> bool:
        """Readers worth showing: on the answer's lineage, or writes that may lose the information.

        Other questions' retrievals and answers also read the store; they are dead ends.
        """
        G = walk.G
        if G.nodes[op].get("type") != OPERATION or not candidate_operations(G, op):
            return False
        if G.nodes[op].get("order", 0) >= walk.before:
            return False
        return op in walk.ancestry or G.nodes[op].get("category") in _WRITE_PATH

    @staticmethod
    def _worth_following(walk: _Walk, variable: str) -> bool:
        data = walk.G.nodes[variable]
        return data.get("type") == VARIABLE and (
            variable in walk.ancestry or data.get("kind") in _MEMORY_KINDS)

    def _life(self, walk: _Walk, variable: str) -> list[str]:
        data = walk.G.nodes[variable]
        name = data.get("name", variable)
        if data.get("kind") != VariableKind.MEMORY_UNIT or name in walk.lives:
            return []
        walk.lives.add(name)
        return [render_memory_life(walk.G, name, walk.index, max_chars=self.max_chars)]

    def _note_units(self, walk: _Walk, ops: list[str]) -> None:
        for op in ops:
            for v in (*walk.G.predecessors(op), *walk.G.successors(op)):
                if walk.G.nodes[v].get("kind") == VariableKind.MEMORY_UNIT:
                    walk.units.add(walk.G.nodes[v].get("name", v))

    def _operation(self, walk: _Walk, ref: object) -> str:
        op = walk.index.resolve(ref)
        if op is None or not candidate_operations(walk.G, op):
            raise MalformedOutput(f"unknown operation id {str(ref)[:60]!r}")
        return op

    def _judge(self, walk: _Walk, args: dict[str, Any]) -> str:
        op = self._operation(walk, args.get("op_id"))
        faulty = args.get("faulty")
        if not isinstance(faulty, bool):
            raise MalformedOutput("faulty must be true or false")
        walk.verdicts[op] = (faulty, str(args.get("reason") or ""))
        walk.seen.setdefault(op, None)
        return f"recorded: {walk.index.alias(op)} {'faulty' if faulty else 'ok'}"

    def _final(self, walk: _Walk, args: dict[str, Any]) -> str:
        op = self._operation(walk, args.get("op_id"))
        error_type = parse_error_type(args.get("error_type"))
        unfollowed = sorted(walk.units - walk.lives)
        if error_type is ErrorType.RETRIEVAL and unfollowed and not walk.guard_used:
            walk.guard_used = True
            first = [_latest_version(walk.G, name) for name in unfollowed[: self.max_frontier]]
            walk.push(first, self.max_frontier)
            return ("rejected: before blaming retrieval, follow these memory units through their "
                    f"whole life with expand: {', '.join(first)}")
        walk.final = {"op": op, "type": error_type, "explanation": str(args.get("explanation") or ""),
                      "confidence": args.get("confidence")}
        return "done"

    # -- endings ---------------------------------------------------------------
    def _finish(self, walk: _Walk, result: Attribution) -> None:
        final = walk.final
        assert final is not None
        result.blame(walk.G, final["op"])
        result.error_type = final["type"]
        result.explanation = final["explanation"][:1000]
        try:
            result.confidence = min(max(float(final["confidence"]), 0.0), 1.0)
        except (TypeError, ValueError):
            result.confidence = 0.5
        result.evidence_path = evidence_path(walk.G, start_variables(walk.G, walk.case), final["op"],
                                             walk.case.answer)

    def _stop(self, walk: _Walk, result: Attribution, reason: str) -> None:
        """Out of budget or steps: the earliest operation judged faulty, else a failure."""
        candidate = walk.best_candidate()
        if candidate is None:
            raise LLMError(reason)
        result.blame(walk.G, candidate)  # the error type its role stands for
        why = walk.verdicts[candidate][1]
        result.explanation = f"{reason} before a final answer; earliest operation judged faulty: {why}"[:1000]
        result.confidence = 0.3
        result.evidence_path = evidence_path(walk.G, start_variables(walk.G, walk.case), candidate,
                                             walk.case.answer)


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as error:
        raise MalformedOutput(f"arguments are not JSON ({error.msg})") from None
    if not isinstance(value, dict):
        raise MalformedOutput("arguments are not a JSON object")
    return value


def _latest_version(G: nx.DiGraph, name: str) -> str:
    versions = [n for n, d in G.nodes(data=True) if d.get("type") == VARIABLE and d.get("name") == name]
    return max(versions, key=lambda n: G.nodes[n].get("version", 0))


def _best_matching(G: nx.DiGraph, variables: list[str], text: str, k: int) -> list[str]:
    """The ``k`` variables sharing most words with ``text`` (no evidence ids: guess the evidence)."""
    wanted = set(_WORD.findall(text.lower()))

    def score(v: str) -> int:
        return len(set(_WORD.findall((G.nodes[v].get("content") or "").lower())) & wanted)

    return sorted(variables, key=lambda v: (-score(v), v))[:k]


register_engine(LLMAgentEngine.name, LLMAgentEngine)
