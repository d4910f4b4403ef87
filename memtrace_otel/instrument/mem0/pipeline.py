"""The stages inside ``add``: the search of existing memories, the LLM calls, the batch insert.

They run as children of the ``add`` operation, found through its :class:`~.scope.Scope`
when mem0 calls its vector store or its LLM. Which LLM call is which is the
generation's business (``v1.py``: extraction then decisions; ``v2.py``: one
extraction); each call's response is parsed as mem0 parses it, into the variable
the next stage reads (``prompt -> response -> facts``, ``-> decisions``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from memtrace_otel.instrument.genai import RetrievedRecord
from memtrace_otel.instrument.mem0.lifecycle import Arguments, MethodSpec
from memtrace_otel.instrument.mem0.scope import RecordWriter, Role, Scope, record_name, stored_variable
from memtrace_otel.instrument.mem0.stages import StageOperation
from memtrace_otel.semconv import Category, GenAIOperation, VariableKind

__all__ = ["BatchCreateSpec", "ExistingSearchSpec", "LlmCallSpec", "lines_of", "parse_json_object",
           "prompt_text", "write_records"]

Parser = Callable[[Any], list[str]]
"""From the LLM's response to the lines the next stage reads (facts, decisions)."""


def parse_json_object(response: Any) -> Mapping[str, Any]:
    """The JSON object in an LLM response, as mem0 reads it (code fences and chatter tolerated).

    >>> parse_json_object('```json\\n{"facts": ["a"]}\\n```')
    {'facts': ['a']}
    >>> parse_json_object("no json here")
    {}
    """
    if not isinstance(response, str):
        return {}
    if response[:1] == "{":  # a bare JSON object (json mode's answer): parsed whole, nothing to strip or cut
        try:
            whole = orjson.loads(response)
        except orjson.JSONDecodeError:
            whole = None
        if type(whole) is dict:  # orjson read it all: the object the cut below would have found
            return whole
    text = response.strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:  # orjson first (a C call, where json.loads(strict=False) builds a decoder per call); json's
        # strict=False, as mem0's own parse, for control characters inside strings, which orjson refuses
        value = orjson.loads(text[start:end + 1])
    except orjson.JSONDecodeError:
        try:
            value = json.loads(text[start:end + 1], strict=False)
        except ValueError:
            return {}
    return value if type(value) is dict or isinstance(value, Mapping) else {}


class _StageSpec(MethodSpec):
    """A stage of ``add``'s pipeline: traced only inside a traced ``add`` of the same memory
    (a ``memtrace.stage`` event of its span unless the instrumentor was asked for stage spans)."""

    def applies(self, instance: Any, arguments: Arguments, parent: Scope | None) -> bool:
        return parent is not None and parent.role is Role.ADD and instance is self.target(parent)

    def target(self, parent: Scope) -> Any:
        return getattr(parent.memory, "vector_store", None)

    def memory_of(self, instance: Any, parent: Scope | None) -> Any:
        return parent.memory if parent is not None else instance

    def open(self, tracer: Any, instance: Any, arguments: Arguments, parent: Scope | None) -> Scope:
        scope = super().open(tracer, instance, arguments, parent)
        scope.parent = parent
        return scope


class ExistingSearchSpec(_StageSpec):
    """``add`` searching the memories its new facts may change (1.x: per fact; 2.x: once)."""

    def record_id(self, arguments: Arguments) -> None:
        return None

    def begin(self, scope: Scope, arguments: Arguments, parent: Scope | None) -> None:
        assert parent is not None
        query = arguments.get("query")
        matching = [v for v in parent.sources if v.content == query]
        for variable in matching or parent.sources:
            scope.op.read(variable)

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        assert scope.parent is not None
        found = []
        for record in result if isinstance(result, list) else []:
            record_id, payload = getattr(record, "id", None), getattr(record, "payload", None)
            stored = stored_variable(scope.registry, record_id, payload)
            variable = scope.op.read(stored, kind=VariableKind.MEMORY_UNIT)
            scope.parent.retrieved.append(variable)
            score = getattr(record, "score", None)
            found.append(RetrievedRecord(variable, score if isinstance(score, int | float) else None,
                                         str(getattr(record, "id", None))))
        top_k = arguments.get("top_k", arguments.get("limit"))
        scope.op.record_retrieval(found, top_k=top_k if isinstance(top_k, int) else None)


class LlmCallSpec(_StageSpec):
    """One LLM call of ``add``: prompt -> response -> parsed lines, the next stage's input."""

    def __init__(self, name: str, category: Category, output: str, parse: Parser, *,
                 reads_retrieved: bool) -> None:
        super().__init__(name, category)
        self.output, self.parse, self.reads_retrieved = output, parse, reads_retrieved

    def target(self, parent: Scope) -> Any:
        return getattr(parent.memory, "llm", None)

    def record_id(self, arguments: Arguments) -> None:
        return None

    def begin(self, scope: Scope, arguments: Arguments, parent: Scope | None) -> None:
        assert parent is not None
        op = scope.op
        inputs = [op.read(v) for v in parent.sources + (parent.retrieved if self.reads_retrieved else [])]
        text = prompt_text(arguments.get("messages"))
        prompt = op.intermediate(f"{self.name}.prompt:{_span_id(scope)}", text, kind=VariableKind.PROMPT)
        op.step("prompt", inputs, [prompt])
        scope.sources = [prompt]
        model = getattr(getattr(scope.memory, "config", None), "llm", None)
        model_name = getattr(getattr(getattr(scope.memory, "llm", None), "config", None), "model", None)
        op.record_llm_call(model=model_name if isinstance(model_name, str) else None,
                           provider=getattr(model, "provider", None))

    def end(self, scope: Scope, arguments: Arguments, result: Any) -> None:
        assert scope.parent is not None
        op, span_id = scope.op, _span_id(scope)
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        response = op.intermediate(f"{self.name}.response:{span_id}", text, kind=VariableKind.RESPONSE)
        op.step("response", scope.sources, [response])
        lines = self.parse(result)
        parsed = op.write(f"{self.output}:{span_id}", "\n".join(lines), kind=VariableKind.FACTS)
        op.step("parse", [response], [parsed])
        op.set_outcome(f"{len(lines)} {self.output.rsplit('.', 1)[-1]}")
        scope.parent.sources = [parsed]


class BatchCreateSpec(_StageSpec):
    """2.x ``add`` inserting its new memories in one batch (no ``_create_memory`` call)."""

    role = Role.CREATE
    gen_ai = GenAIOperation.CREATE_MEMORY

    def record_id(self, arguments: Arguments) -> None:
        return None

    def begin(self, scope: Scope, arguments: Arguments, parent: Scope | None) -> None:
        assert parent is not None
        for variable in parent.sources:
            scope.op.read(variable)
        write_records(scope.op, arguments)


def write_records(op: RecordWriter, arguments: Arguments) -> None:
    """Each inserted record becomes a new memory-unit version, its lineage written into its payload."""
    ids, payloads = arguments.get("ids"), arguments.get("payloads")
    if not isinstance(ids, Sequence) or not isinstance(payloads, Sequence):
        return
    records = []
    for record_id, payload in zip(ids, payloads, strict=False):
        if isinstance(payload, dict):
            data = payload.get("data")
            variable = op.write(record_name(record_id), data if isinstance(data, str) else None,
                                kind=VariableKind.MEMORY_UNIT)
            op.lineage_metadata(variable, payload)
            records.append(RetrievedRecord(variable, None, str(record_id)))
    if len(ids) == 1:
        op.record_memory(record_id=str(ids[0]), records=records)
    else:
        op.record_memory(count=len(ids), records=records)


def _span_id(scope: Scope) -> str:
    """What names a stage's own variables: its span id, or its stage id when it is an event."""
    op = scope.op
    return f"{op.stage_id if isinstance(op, StageOperation) else op.span_context.span_id:016x}"


def prompt_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return str(messages)
    return "\n\n".join(str(m.get("content")) for m in messages if isinstance(m, Mapping))


def lines_of(values: Any) -> list[str]:
    """Strings of a list, or of each ``text`` in a list of objects (how mem0 returns facts).

    >>> lines_of(["a", {"text": "b"}, 3])
    ['a', 'b']
    """
    if not isinstance(values, list):
        return []
    out = []
    for value in values:
        if type(value) is str:  # mem0's facts: strings (no ABC check per string)
            if value:
                out.append(value)
            continue
        text = value.get("text") if isinstance(value, Mapping) else value
        if isinstance(text, str) and text:
            out.append(text)
    return out
