"""smartcomment execution graphs (``ExecNetwork.export_graph()``, MemTraceBench files) as spans.

smartcomment joins variables directly: each edge goes from one variable version
(``full_node_id`` = ``class_name:name@version``) to another and carries the
``op_id`` of the operation that made it; an operation is the group of edges
sharing its ``op_id``. This module turns each operation into one span whose
``memtrace.inputs`` are its edges' sources and ``memtrace.outputs`` its
targets, so the graph builder rebuilds the same lineage, bipartite; each
session becomes a trace (a root span named after the session, the operations
its children). Nothing is dropped: every edge stays on its operation's span
(``smartcomment.edge.*``), every variable is described once with its content
and original id, and each MemTraceBench annotation becomes the verdict of the
evaluation that judged its prediction, with the gold labels (``final_op_id``,
``final_error_type``) in ``smartcomment.label.*`` keys the builder never reads.

The schema's traps, handled here (``docs/smartcomment.md`` has the list):

* identities are content hashes by default, so equal values are one node: an
  ``"I don't know."`` written by three generations is one variable with three
  writers. Each later writer gets its own copy ``name~k@version`` and each
  reader reads the copy of the latest writer before it;
* values are encoded with ``repr`` by default (``"'text'"``): decoded here, and a list of
  strings (MemBase's extracted facts) becomes JSON, whose items a reader sees as statements;
* the NONE sentinel (``COMMENT:NONE@1``) stands for "no inputs" or "no
  outputs" and the NONE operation (``__none_op__``) for links made outside any
  operation; neither is lineage. Each NONE-operation edge becomes its own span;
* ``created_at`` is local time without a zone, to the millisecond: read as UTC,
  ties broken by the order of the file's operation list;
* ``comment_mutation`` writes a version edge ``x@v -> x@v+1`` under its own
  operation (category ``mutation`` unless named): that is an update.

Bad input is one :class:`~memtrace_otel.spans.model.Problem` per thing, and
the rest is converted.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from memtrace_otel.semconv import (
    SMARTCOMMENT_SCOPE,
    Category,
    EvaluationSignal,
    MemTrace,
    SmartComment,
    VariableKind,
)
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.wire import MalformedId, content_hash, describe, parse_variable_id

__all__ = [
    "NONE_NODE",
    "NONE_OPERATION",
    "OPERATION_CATEGORIES",
    "VARIABLE_KINDS",
    "decode_value",
    "is_smartcomment_document",
    "records_from_smartcomment",
]

NONE_NODE = "COMMENT:NONE@1"
"""smartcomment's sentinel variable: source of an operation without inputs, target of one without outputs."""
NONE_OPERATION = "__none_op__"
"""smartcomment's sentinel operation: the owner of edges made outside any operation (``comment_link``)."""

OPERATION_CATEGORIES: dict[str, Category] = {
    **{str(c.value): c for c in Category},
    "ingestion": Category.INGEST, "add": Category.INGEST, "write": Category.INGEST,
    "extract": Category.EXTRACTION, "mutation": Category.UPDATE, "merge": Category.UPDATE,
    "consolidation": Category.UPDATE, "delete": Category.DELETION, "forget": Category.DELETION,
    "retrieve": Category.RETRIEVAL, "search": Category.RETRIEVAL, "recall": Category.RETRIEVAL,
    "reranking": Category.RERANK, "generate": Category.GENERATION, "answer": Category.GENERATION,
    "response": Category.GENERATION, "evaluate": Category.EVALUATION, "judge": Category.EVALUATION,
    # MemBase's (zjunlp/MemBase): mem0's direct add, EverMemOS's scenario cut and memory-unit creation
    "embedding": Category.INGEST, "boundary_detection": Category.EXTRACTION,
    "initialization": Category.INGEST,
    # smartcomment's own defaults: an unnamed operation, a link, the sentinel
    "operation": Category.OTHER, "link": Category.OTHER, "sentinel": Category.OTHER,
}
"""The one table from smartcomment operation categories to this project's; others read as ``other``."""

VARIABLE_KINDS: dict[str, VariableKind] = {
    **{str(k.value): k for k in VariableKind},
    "msg": VariableKind.MESSAGE, "dialogue": VariableKind.MESSAGE, "turn": VariableKind.MESSAGE,
    "memory": VariableKind.MEMORY_UNIT, "memory_item": VariableKind.MEMORY_UNIT,
    "fact": VariableKind.MEMORY_UNIT, "memory_store": VariableKind.STORE, "question": VariableKind.QUERY,
    "retrieved": VariableKind.CONTEXT, "completion": VariableKind.RESPONSE, "prediction": VariableKind.ANSWER,
    "golden_answer": VariableKind.GOLD, "judgement": VariableKind.VERDICT,
    # MemBase's categories
    "memory_entry": VariableKind.MEMORY_UNIT, "memory_context": VariableKind.CONTEXT,
    "message & query": VariableKind.QUERY, "golden_answers": VariableKind.GOLD,
    "llm_response": VariableKind.RESPONSE,
    # an agentic search's rewrites of the question (EverMemOS's round 2): they say the question, no fact
    "refined_queries": VariableKind.QUERY, "refined_query": VariableKind.QUERY,
}
"""Variable categories (and class names) that name a variable kind; others are ``other``. A node's
``class_name`` is read first: MemBase files its answers as ``prediction`` of category ``llm_response``."""

_REQUIRED = ("nodes", "edges", "operations", "sessions")
_REPR_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
_REPR_STRING_PATTERN = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_REPR_STRING = re.compile(_REPR_STRING_PATTERN, re.DOTALL)
"""One ``repr``-encoded string: its quotes and what is between them (escapes kept whole)."""
_REPR_LIST = re.compile(rf"\[\s*(?:{_REPR_STRING_PATTERN})(?:\s*,\s*(?:{_REPR_STRING_PATTERN}))*\s*,?\s*\]",
                        re.DOTALL)
"""A ``repr``-encoded list of strings, nothing else in it."""
_REPR_SCALAR_PATTERN = rf"{_REPR_STRING_PATTERN}|True|False|None|-?\d+(?:\.\d+)?"
_REPR_SCALAR = re.compile(_REPR_SCALAR_PATTERN, re.DOTALL)
_REPR_ITEM_PATTERN = rf"(?:{_REPR_STRING_PATTERN})\s*:\s*(?:{_REPR_SCALAR_PATTERN})"
_REPR_DICT = re.compile(rf"\{{\s*{_REPR_ITEM_PATTERN}(?:\s*,\s*{_REPR_ITEM_PATTERN})*\s*,?\s*\}}", re.DOTALL)
"""A ``repr``-encoded record: string keys, each to a string, a number, ``True``, ``False`` or ``None``."""
_REPR_CONSTANTS: dict[str, object] = {"True": True, "False": False, "None": None}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if len(code) > 1:
        return chr(int(code[1:], 16)) if int(code[1:], 16) <= 0x10FFFF else match.group(0)
    return _SIMPLE_ESCAPES.get(code, match.group(0))


def _repr_scalar(literal: str) -> object:
    """One scalar of a ``repr``-encoded record, as the value it writes (nothing evaluated)."""
    if literal[:1] in "'\"":
        return _REPR_ESCAPE.sub(_unescape, literal[1:-1])
    if literal in _REPR_CONSTANTS:
        return _REPR_CONSTANTS[literal]
    return float(literal) if "." in literal else int(literal)


def _is_json(value: str) -> bool:
    """Whether ``value`` is JSON already (MemBase writes its records so): kept as written."""
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def decode_value(value: str) -> str:
    """The text of a smartcomment ``value``: a ``repr``-encoded string is unquoted, a ``repr``-encoded
    list of strings (MemBase's extracted facts, ``"['Ann adopted a dog.']"``) becomes the same list in
    JSON, so a reader sees its items as statements, and a ``repr``-encoded flat record (an app's memory
    unit traced as a dict, ``"{'id': 'm7', 'text': 'Ann adopted a dog.'}"``) becomes the same record in
    JSON, so its text field is what it says, as a JSON memory's is (its id and keys are no words of
    the unit: a retriever that handed on the unit's text handed on all it says); anything else is kept.

    Nothing is evaluated: only string literals are unescaped, a list is taken only when it is
    string literals and commas (:data:`_REPR_LIST`), and a record only when it is string keys to
    string, number and constant literals (:data:`_REPR_DICT`). A short list's brackets must not read
    as a line's ``[date]`` header.

    >>> decode_value("'Alice: I\\\\'m home'")
    "Alice: I'm home"
    >>> decode_value("{'id': 'm1', 'text': 'Ann adopted a dog.', 'deleted': True}")
    '{"id": "m1", "text": "Ann adopted a dog.", "deleted": true}'
    >>> decode_value('{"id": "m1"}')
    '{"id": "m1"}'
    >>> decode_value("{'id': ['m1']}")
    "{'id': ['m1']}"
    >>> decode_value("['Nate hosted a party with 7 guests.']")
    '["Nate hosted a party with 7 guests."]'
    >>> decode_value("['a', 3]")
    "['a', 3]"
    """
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return _REPR_ESCAPE.sub(_unescape, value[1:-1])
    if len(value) >= 4 and value[0] == "[" and value[-1] == "]" and _REPR_LIST.fullmatch(value):
        return json.dumps([_REPR_ESCAPE.sub(_unescape, item.group(0)[1:-1])
                           for item in _REPR_STRING.finditer(value)], ensure_ascii=False)
    if value[:1] == "{" and value[-1:] == "}" and _REPR_DICT.fullmatch(value) and not _is_json(value):
        scalars = [_repr_scalar(item.group(0)) for item in _REPR_SCALAR.finditer(value)]
        return json.dumps(dict(zip(scalars[::2], scalars[1::2], strict=True)), ensure_ascii=False)
    return value


def is_smartcomment_document(document: Any) -> bool:
    """Whether a parsed JSON document has smartcomment's shape (``data`` an object, not Jaeger's list).

    >>> is_smartcomment_document({"data": {"nodes": []}}), is_smartcomment_document({"data": []})
    (True, False)
    """
    return isinstance(document, dict) and isinstance(document.get("data"), dict)


def _hex(*parts: str, size: int) -> str:
    return hashlib.blake2b("\x1f".join(parts).encode("utf-8", "replace"), digest_size=size).hexdigest()


_EPOCH_CACHE: dict[str, int] = {}


def _nanos(stamp: Any) -> int:
    """``created_at`` (``YYYY-MM-DD HH:MM:SS.sss``, local time, no zone) in ns, read as UTC; 0 if bad."""
    if not isinstance(stamp, str):
        return 0
    value = _EPOCH_CACHE.get(stamp)
    if value is None:
        try:
            parsed = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
            value = int(parsed.timestamp() * 1000) * 1_000_000
        except ValueError:
            value = 0
        if len(_EPOCH_CACHE) > 100_000:
            _EPOCH_CACHE.clear()
        _EPOCH_CACHE[stamp] = value
    return value


class _Document:
    """One smartcomment graph, its lists checked item by item; not thread-safe."""

    def __init__(self, document: dict[str, Any], where: str, problems: list[Problem]) -> None:
        self.where, self.problems = where, problems
        data = document["data"]
        graph_id, project = document.get("graph_id"), document.get("project_id")
        self.graph_id: str = graph_id if isinstance(graph_id, str) else where
        self.service: str = project if isinstance(project, str) else "smartcomment"
        self.nodes = self._index(data, "nodes", "full_node_id")
        self.sessions = self._index(data, "sessions", "session_id")
        self.operations = self._index(data, "operations", "op_id")
        self.edges = list(self._index(data, "edges", "edge_id").values())
        raw = data.get("annotations", [])
        self.annotations = raw if isinstance(raw, list) else []
        if not isinstance(raw, list):
            self.problem(f"data.annotations is {type(raw).__name__}, not a list; ignored")

    def problem(self, message: str) -> None:
        self.problems.append(Problem(self.where, f"smartcomment {message}"))

    def _index(self, data: dict[str, Any], key: str, id_key: str) -> dict[str, dict[str, Any]]:
        items = data.get(key)
        out: dict[str, dict[str, Any]] = {}
        if not isinstance(items, list):
            return out
        for number, item in enumerate(items):
            ident = item.get(id_key) if isinstance(item, dict) else None
            if not isinstance(ident, str) or not ident:
                self.problem(f"data.{key}[{number}] has no string {id_key}; skipped")
            elif ident in out:
                self.problem(f"data.{key}[{number}]: duplicate {id_key} {ident[:80]!r}; skipped")
            else:
                out[ident] = item
        return out

    def text(self, item: dict[str, Any], key: str) -> str | None:
        value = item.get(key)
        return value if isinstance(value, str) else None


class _Op:
    """One operation being converted into a span."""

    __slots__ = ("attributes", "edges", "ident", "inputs", "item", "order", "outputs", "session", "span_id",
                 "start")

    def __init__(self, ident: str, item: dict[str, Any], order: int, start: int) -> None:
        self.ident, self.item, self.order, self.start = ident, item, order, start
        self.edges: list[dict[str, Any]] = []
        self.inputs: dict[str, None] = {}
        self.outputs: dict[str, None] = {}
        self.attributes: dict[str, Any] = {}
        session = item.get("session_id")
        self.session: str = session if isinstance(session, str) else ""
        self.span_id = ""


def _operations(doc: _Document) -> list[_Op]:
    """Operations in execution order, each with its edges; each NONE-operation edge is an operation."""
    ops = {ident: _Op(ident, item, 0, _nanos(item.get("created_at")))
           for ident, item in doc.operations.items() if ident != NONE_OPERATION}
    singles: list[_Op] = []
    for edge in doc.edges:
        op_id = edge.get("op_id")
        if op_id == NONE_OPERATION:
            single = _Op(f"{NONE_OPERATION}/{edge['edge_id']}", edge, 0, _nanos(edge.get("created_at")))
            single.edges.append(edge)
            singles.append(single)
        elif isinstance(op_id, str) and op_id in ops:
            ops[op_id].edges.append(edge)
        else:
            doc.problem(f"edge {edge['edge_id'][:80]}: op_id {str(op_id)[:80]!r} names no operation; kept "
                        "as an operation of its own (category other)")
            orphan = ops.setdefault(f"{op_id}", _Op(f"{op_id}", {"op_id": op_id, "category": "other",
                                                                 "session_id": edge.get("session_id")},
                                                    0, _nanos(edge.get("created_at"))))
            orphan.edges.append(edge)
    ordered = sorted([*ops.values(), *singles], key=lambda op: op.start)  # stable: file order breaks ties
    for order, op in enumerate(ordered):
        op.order = order
    return ordered


def _lineage(doc: _Document, ops: list[_Op]) -> dict[str, list[tuple[int, str]]]:
    """Fill each operation's inputs and outputs; returns, per node, its writers as ``(order, copy id)``."""
    writers: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for op in ops:
        for edge in op.edges:
            source, target = edge.get("source_full_node_id"), edge.get("target_full_node_id")
            if not _endpoint(doc, edge, "source", source) or not _endpoint(doc, edge, "target", target):
                continue
            assert isinstance(source, str) and isinstance(target, str)  # _endpoint admits node ids only
            if source != NONE_NODE:
                op.inputs[source] = None
            if target != NONE_NODE:
                op.outputs[target] = None
        for target in list(op.outputs):
            copies = writers[target]
            copy = target if not copies else _copy_id(doc.nodes[target], target, len(copies) + 1)
            copies.append((op.order, copy))
            if copy != target:
                del op.outputs[target]
                op.outputs[copy] = None
    return writers


def _endpoint(doc: _Document, edge: dict[str, Any], end: str, node: Any) -> bool:
    if node == NONE_NODE or (isinstance(node, str) and node in doc.nodes):
        return True
    doc.problem(f"edge {edge['edge_id'][:80]}: {end} {str(node)[:80]!r} is not a node (dangling); kept on "
                "its operation's span, left out of lineage")
    return False


def _copy_id(node: dict[str, Any], full_id: str, k: int) -> str:
    name, version = parse_variable_id(full_id)
    return f"{name}~{k}@{version}"


def _resolve_reads(ops: list[_Op], writers: dict[str, list[tuple[int, str]]]) -> None:
    """Point each read of a node with several writers at the copy of the latest writer before the reader."""
    for op in ops:
        if not any(len(writers.get(node, ())) > 1 for node in op.inputs):
            continue
        resolved: dict[str, None] = {}
        for node in op.inputs:
            copies = writers.get(node, ())
            before = [copy for order, copy in copies if order < op.order]
            resolved[before[-1] if before else node] = None
        op.inputs = resolved


class _Converter:
    """Turns one checked :class:`_Document` into span records; not thread-safe (one per document)."""

    def __init__(self, doc: _Document) -> None:
        self.doc = doc
        self.ops = _operations(doc)
        self.writers = _lineage(doc, self.ops)
        _resolve_reads(self.ops, self.writers)
        self.origin = {copy: node for node, copies in self.writers.items() for _, copy in copies}
        self.producer: dict[str, _Op] = {copy: op for op in self.ops for copy in op.outputs}
        self.unknown: dict[str, int] = defaultdict(int)
        self.roots: dict[str, str] = {}  # session id -> root span id

    def variable(self, copy: str) -> tuple[str, str, str, str]:
        """Descriptor, content, original id and category of a variable copy."""
        original = self.origin.get(copy, copy)
        node = self.doc.nodes[original]
        raw = node.get("value")
        content = decode_value(raw) if isinstance(raw, str) else ""
        given, class_name = node.get("category"), node.get("class_name")
        category = given if isinstance(given, str) else ""
        kind = VARIABLE_KINDS.get(class_name) if isinstance(class_name, str) else None
        kind = kind or VARIABLE_KINDS.get(category, VariableKind.OTHER)
        descriptor = describe(str(kind.value), len(content), content_hash(content), self.vid(copy))
        return descriptor, content, original, category

    def vid(self, copy: str) -> str:
        """The variable id in the evolution graph: qualified by the graph id, because smartcomment ids are
        per graph (every conversation has its ``msg:D1:1@1``) and the builder stitches files by id."""
        return f"{self.doc.graph_id}/{copy}"

    def describe(self, attributes: dict[str, Any], copies: list[str]) -> None:
        if not copies:
            return
        described = [self.variable(copy) for copy in copies]
        attributes[MemTrace.VARIABLES] = [d[0] for d in described]
        attributes[MemTrace.VARIABLE_CONTENTS] = [d[1] for d in described]
        attributes[SmartComment.VARIABLE_IDS] = [d[2] for d in described]
        attributes[SmartComment.VARIABLE_CATEGORIES] = [d[3] for d in described]

    def category(self, op: _Op) -> Category:
        raw = op.item.get("category") if op.ident == op.item.get("op_id") else NONE_OPERATION
        if raw == NONE_OPERATION:
            return Category.OTHER
        known = OPERATION_CATEGORIES.get(raw) if isinstance(raw, str) else None
        if known is None:
            self.unknown[str(raw)[:60]] += 1
            return Category.OTHER
        return known

    def op_attributes(self, op: _Op, described: set[str]) -> None:
        item, category = op.item, self.category(op)
        a = op.attributes
        a[MemTrace.OPERATION_NAME] = self.doc.text(item, "op_name") or op.ident
        a[MemTrace.OPERATION_CATEGORY] = str(category.value)
        a[SmartComment.OP_ID], a[SmartComment.GRAPH_ID] = op.ident, self.doc.graph_id
        a[SmartComment.OP_CATEGORY] = item.get("category") if isinstance(item.get("category"), str) else ""
        if self.doc.text(item, "comment"):
            a[SmartComment.OP_COMMENT] = item["comment"]
        a[MemTrace.INPUTS] = [self.vid(v) for v in op.inputs]
        a[MemTrace.OUTPUTS] = [self.vid(v) for v in op.outputs]
        if category == Category.DELETION and op.outputs:
            a[MemTrace.DELETED] = a[MemTrace.OUTPUTS]
        new = [v for v in (*op.inputs, *op.outputs) if v not in described
               and (v in op.outputs or not self.writers.get(self.origin.get(v, v)))]
        described.update(new)
        self.describe(a, new)
        a[SmartComment.EDGE_IDS] = [e["edge_id"] for e in op.edges]
        a[SmartComment.EDGE_SOURCES] = [str(e.get("source_full_node_id")) for e in op.edges]
        a[SmartComment.EDGE_TARGETS] = [str(e.get("target_full_node_id")) for e in op.edges]
        a[SmartComment.EDGE_CATEGORIES] = [str(e.get("category")) for e in op.edges]

    def convert(self) -> list[SpanRecord]:
        described: set[str] = set()
        for op in self.ops:
            self.op_attributes(op, described)
        for name, count in sorted(self.unknown.items()):
            self.doc.problem(f"category {name!r} ({count} operation(s)) is not a known category; "
                             "read as other")
        _Annotations(self).attach()
        spans = [self.span(op) for op in self.ops]
        return [*self.session_spans(spans, described), *spans]

    def trace_id(self, session: str) -> str:
        return _hex(self.doc.graph_id, session, size=16)

    def span(self, op: _Op) -> SpanRecord:
        ends = [_nanos(e.get("created_at")) for e in op.edges]
        start = op.start + op.order  # ms stamps: the order within one millisecond is the file's
        op.span_id = op.span_id or _hex(self.doc.graph_id, op.ident, size=8)
        return SpanRecord(self.trace_id(op.session), op.span_id, op.attributes[MemTrace.OPERATION_NAME],
                          parent_span_id=self.root(op.session), start_time_unix_nano=start,
                          end_time_unix_nano=max([start, *ends]) + 1, attributes=op.attributes,
                          service_name=self.doc.service, source=self.doc.where, kind="INTERNAL",
                          scope_name=SMARTCOMMENT_SCOPE, resource_attributes=self.resource)

    @property
    def resource(self) -> dict[str, Any]:
        return {"service.name": self.doc.service}

    def root(self, session: str) -> str:
        if session not in self.roots:
            self.roots[session] = _hex(self.doc.graph_id, session, "session", size=8)
        return self.roots[session]

    def session_spans(self, spans: list[SpanRecord], described: set[str]) -> Iterator[SpanRecord]:
        """One root span per session; variables no operation touched are described on their session's."""
        untouched: dict[str, list[str]] = defaultdict(list)
        for node, item in self.doc.nodes.items():
            if node not in described and node not in self.origin:
                untouched[str(item.get("session_id"))].append(node)
        by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
        for span in spans:
            by_trace[span.trace_id].append(span)
        for session in sorted({*self.doc.sessions, *untouched, *(op.session for op in self.ops)}):
            children = by_trace.get(self.trace_id(session), [])
            yield self.session_span(session, children, untouched.get(session, []))

    def session_span(self, session: str, children: list[SpanRecord], untouched: list[str]) -> SpanRecord:
        item = self.doc.sessions.get(session, {})
        a: dict[str, Any] = {SmartComment.GRAPH_ID: self.doc.graph_id, SmartComment.SESSION_ID: session}
        for key, field in ((SmartComment.SESSION_NAME, "session_name"),
                           (SmartComment.SESSION_CATEGORY, "category")):
            if self.doc.text(item, field):
                a[key] = item[field]
        self.describe(a, untouched)
        start = min([c.start_time_unix_nano for c in children] or [_nanos(item.get("created_at"))])
        end = max([c.end_time_unix_nano for c in children] or [start + 1])
        name = a.get(SmartComment.SESSION_NAME, session)
        return SpanRecord(self.trace_id(session), self.root(session), name,
                          start_time_unix_nano=start, end_time_unix_nano=end, attributes=a,
                          service_name=self.doc.service, source=self.doc.where, kind="INTERNAL",
                          scope_name=SMARTCOMMENT_SCOPE, resource_attributes=self.resource)


class _Annotations:
    """MemTraceBench annotations as verdicts on the evaluation that judged each prediction."""

    def __init__(self, converter: _Converter) -> None:
        self.c, self.doc = converter, converter.doc
        self.by_content: dict[str, list[str]] = defaultdict(list)
        for copy in converter.producer:
            self.by_content[converter.variable(copy)[1].strip()].append(copy)
        self.used: set[str] = set()
        self.names: dict[str, str] | None = None

    def attach(self) -> None:
        for number, annotation in enumerate(self.doc.annotations):
            if not isinstance(annotation, dict) or not isinstance(annotation.get("query_id"), str):
                self.doc.problem(f"data.annotations[{number}] is not an object with a string query_id; "
                                 "skipped")
                continue
            self.attach_one(annotation)

    def answer(self, query: str | None, prediction: str | None) -> str | None:
        """The answer variable: a copy holding the prediction, written by an operation that read the query."""
        candidates = self.by_content.get((prediction or "").strip(), [])
        for copy in reversed(candidates):
            inputs = self.c.producer[copy].inputs
            if query is not None and any(query.strip() == self.c.variable(v)[1].strip() for v in inputs):
                return copy
        return candidates[-1] if candidates else None

    def evaluation(self, answer: str | None) -> _Op:
        for op in self.c.ops:
            if (answer in op.inputs and op.ident not in self.used
                    and op.attributes[MemTrace.OPERATION_CATEGORY] == Category.EVALUATION):
                return op
        producer = self.c.producer.get(answer or "")
        session = producer.session if producer else "annotations"
        op = _Op(f"annotation/{len(self.c.ops)}", {"session_id": session}, len(self.c.ops),
                 self.c.ops[-1].start if self.c.ops else 0)
        op.attributes = {MemTrace.OPERATION_NAME: "memtracebench.annotation",
                         MemTrace.OPERATION_CATEGORY: str(Category.EVALUATION.value),
                         SmartComment.GRAPH_ID: self.doc.graph_id,
                         MemTrace.INPUTS: [self.c.vid(answer)] if answer else [], MemTrace.OUTPUTS: []}
        self.c.ops.append(op)
        return op

    def attach_one(self, annotation: dict[str, Any]) -> None:
        case = annotation["query_id"]
        query, prediction = _text(annotation, "query"), _text(annotation, "prediction")
        golden = _texts(annotation.get("golden_answers"))
        evidence = _texts(annotation.get("source_evidence_ids"))
        answer = self.answer(query, prediction)
        if answer is None:
            self.doc.problem(f"annotation {case[:80]!r}: no variable holds its prediction; its verdict "
                             "has no answer to follow")
        op = self.evaluation(answer)
        self.used.add(op.ident)
        a = op.attributes
        a.update({MemTrace.EVALUATION_PASSED: False,
                  MemTrace.EVALUATION_SIGNAL: str(EvaluationSignal.GOLD.value),
                  MemTrace.EVALUATION_CASE: case, SmartComment.GOLDEN_ANSWERS: golden,
                  MemTrace.EVALUATION_EVIDENCE: [self.evidence_name(e) for e in evidence],
                  SmartComment.SOURCE_EVIDENCE_IDS: evidence})
        for key, value in ((MemTrace.EVALUATION_QUESTION, query),
                           (MemTrace.EVALUATION_PREDICTION, prediction),
                           (MemTrace.EVALUATION_GOLD, "; ".join(golden) or None),
                           (MemTrace.EVALUATION_ANSWER, answer and self.c.vid(answer))):
            if value is not None:
                a[key] = value
        self.labels(a, annotation, case)

    def evidence_name(self, evidence: str) -> str:
        """The qualified name of this graph's message that ``evidence`` names, else ``evidence`` itself.

        A node id names its variable (``msg:D1:3@1``); a dialogue id (``D1:3``) names the variable
        whose name is it or ends with ``:`` and it (the graph layer's evidence rule), here resolved
        within this graph so that another conversation's ``D1:3`` is never taken for it.
        """
        if self.names is None:
            self.names = {}
            for node in self.doc.nodes:
                name = parse_variable_id(node)[0]
                for key in (node, name, name.partition(":")[2]):
                    self.names.setdefault(key, name)
        known = self.names.get(evidence)
        return evidence if known is None else f"{self.doc.graph_id}/{known}"

    def labels(self, a: dict[str, Any], annotation: dict[str, Any], case: str) -> None:
        error_type, op_id = _text(annotation, "final_error_type"), _text(annotation, "final_op_id")
        if error_type is not None:
            a[SmartComment.LABEL_ERROR_TYPE] = error_type
        if op_id is None:
            return
        a[SmartComment.LABEL_OP_ID] = op_id
        if op_id in self.doc.operations and op_id != NONE_OPERATION:
            a[SmartComment.LABEL_SPAN_ID] = _hex(self.doc.graph_id, op_id, size=8)
        else:
            self.doc.problem(f"annotation {case[:80]!r}: final_op_id {op_id[:80]!r} names no operation; "
                             "the case is kept without its gold operation")


def _text(item: dict[str, Any], key: str) -> str | None:
    value = item.get(key)
    return value if isinstance(value, str) else None


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _check_nodes(doc: _Document) -> None:
    for node in list(doc.nodes):
        try:
            parse_variable_id(node)
        except MalformedId as error:
            doc.problem(f"node {node[:80]!r}: {error}; skipped")
            del doc.nodes[node]


def records_from_smartcomment(document: Any, where: str, problems: list[Problem]) -> Iterator[SpanRecord]:
    """Spans of one smartcomment execution graph (``ExecNetwork.export_graph()``, MemTraceBench files).

    Parameters
    ----------
    document:
        The parsed JSON document.
    where:
        ``file:line`` for problem lines.
    problems:
        Receives one :class:`Problem` per thing skipped or repaired.

    Returns
    -------
    iterator of SpanRecord
        A root span per session and a span per operation (scope ``memtrace_otel.smartcomment``).

    >>> problems = []
    >>> list(records_from_smartcomment({"data": {"nodes": {}}}, "g.json:1", problems)), len(problems)
    ([], 1)
    """
    data = document.get("data") if isinstance(document, dict) else None
    missing = [key for key in _REQUIRED if not isinstance((data or {}).get(key), list)]
    if not isinstance(data, dict) or missing:
        problems.append(Problem(where, "not a smartcomment graph: data has no list "
                                       f"{', '.join(repr(m) for m in missing)}; file skipped"))
        return iter(())
    doc = _Document(document, where, problems)
    _check_nodes(doc)
    return iter(_Converter(doc).convert())
