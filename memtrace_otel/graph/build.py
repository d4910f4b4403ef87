"""Build the memory evolution graph from span records.

The graph is a ``networkx.DiGraph`` with two kinds of node (``bipartite`` 0
and 1, networkx's convention; the words are :mod:`memtrace_otel.graph.node_types`):

* variable nodes, keyed by their id ``name@version``: ``type="variable"``,
  ``name``, ``version``, ``kind``, ``hash``, ``size``, ``content`` (or
  ``None``), ``deleted``;
* operation nodes, keyed ``op:<trace_id>:<span_id>``: ``type="operation"``,
  ``name``, ``category``, ``trace_id``, ``span_id``, ``order`` (execution
  order), ``start``, ``status``, evaluation fields on evaluations (``passed``,
  ``score``, ``signal``, ``evidence``, ``answer``, ``case`` and the texts),
  ``steps`` when the span has ``memtrace.step`` events, ``stage_of`` on a stage recorded as a
  ``memtrace.stage`` event (the id of the span it is on; :mod:`memtrace_otel.graph.stages` makes
  it the node its own span would have made), and ``missing_links``:
  the sorted trace ids of the span links that point at spans the input lacks
  (present only when there are some).

Edges: variable -> operation (``role="input"``), operation -> variable
(``role="output"``), and version ``v`` -> ``v+1`` of one variable name
(``role="version"``). Many files and traces become one graph, stitched by
variable ids; a producer that appears only as a span link (its trace was not
read) is listed in ``G.graph["missing_traces"]`` for the trace backend to
fetch. Model calls traced inside a memory operation by a GenAI client
instrumentation become internal steps of it (:mod:`memtrace_otel.graph.genai_steps`:
operation nodes of category ``llm_call`` with ``parent_operation``, edge roles
``step`` and ``derived``).

Every value read from a span is type-checked where it is read
(:mod:`memtrace_otel.graph.attributes`): a wrong one, a malformed variable id,
or a variable version written by two operations is one problem in
``G.graph["problems"]`` and the rest is still built. Lineage cycles are cut
deterministically (:mod:`memtrace_otel.graph.cycles`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import chain, pairwise, repeat
from typing import Any

import networkx as nx

from memtrace_otel.graph.attributes import a_type, number, parse_id, report, strings, text, verdict
from memtrace_otel.graph.cycles import break_cycles
from memtrace_otel.graph.foreign import covered, is_foreign, lineage_spans, search_contexts
from memtrace_otel.graph.genai_steps import GenAICalls, add_genai_steps
from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.graph.packed import PACKED_ADD, kept_key, message_versions, unpack
from memtrace_otel.graph.packed_search import PACKED_SEARCH, unpack_search
from memtrace_otel.graph.stages import has_stages, stage_records
from memtrace_otel.graph.verdicts import evaluator_node, evaluator_node_id, resolve_targets
from memtrace_otel.semconv import (
    GENAI_OPERATION_CATEGORY,
    Category,
    EvaluationSignal,
    GenAI,
    MemTrace,
    MemTraceEvent,
    MemTraceStage,
    MemTraceStep,
    MemTraceTarget,
    VariableKind,
)
from memtrace_otel.signals import EvaluatorVerdict, FailureRule, failing_verdict
from memtrace_otel.spans.model import Problem, SpanLink, SpanRecord
from memtrace_otel.spans.readers import gc_paused
from memtrace_otel.wire import (
    EVALUATION_TEXT_FIELDS,
    MAX_VERSION_DIGITS,
    MalformedId,
    evaluation_text_key,
    operation_node_id,
    parse_descriptor,
)

__all__ = ["ContentLookup", "build_graph", "operation_node_id"]

ContentLookup = Callable[[str], "str | None"]
"""Gives the content of a variable id when spans carry none (in-process attribution)."""

_CONTENT_REF, _TEXTS_REF = MemTrace.CONTENT_REF, MemTrace.EVALUATION_TEXTS_REF
_PACKED = PACKED_ADD
_PACKED_SEARCH = PACKED_SEARCH

_INPUTS, _OUTPUTS, _DELETED = MemTrace.INPUTS, MemTrace.OUTPUTS, MemTrace.DELETED
_VARIABLES, _VARIABLE_CONTENTS = MemTrace.VARIABLES, MemTrace.VARIABLE_CONTENTS

# Enum values as plain strings: enum calls and ``.value`` are slow in a per-span loop, and
# GraphML export wants plain types in node data.
_CATEGORIES = {str(category.value): str(category.value) for category in Category}
_OTHER = str(Category.OTHER.value)
_GENERATION = str(Category.GENERATION.value)
_KINDS = {str(kind.value): str(kind.value) for kind in VariableKind}
_OTHER_KIND = str(VariableKind.OTHER.value)
_SIGNALS = frozenset(str(signal.value) for signal in EvaluationSignal)
_MEMORY_CATEGORIES = {str(op.value): str(category.value) for op, category in GENAI_OPERATION_CATEGORY.items()}
_CATEGORY, _GEN_AI_OPERATION = MemTrace.OPERATION_CATEGORY, GenAI.OPERATION_NAME
_NAME, _OUTCOME, _STORE = MemTrace.OPERATION_NAME, MemTrace.OPERATION_OUTCOME, GenAI.MEMORY_STORE_ID
_PASSED = MemTrace.EVALUATION_PASSED
_EVALUATION_TEXTS = {"question": MemTrace.EVALUATION_QUESTION, "prediction": MemTrace.EVALUATION_PREDICTION,
                     "gold": MemTrace.EVALUATION_GOLD, "explanation": MemTrace.EVALUATION_EXPLANATION,
                     "case": MemTrace.EVALUATION_CASE}


def _category(span: SpanRecord, problems: list[Problem]) -> str | None:
    """The operation's category value, None for a span that is not a memory operation."""
    a = span.attributes
    raw = a.get(_CATEGORY)
    if isinstance(raw, str):
        category = _CATEGORIES.get(raw)
        if category is None:
            report(problems, span, _CATEGORY, f"{raw[:40]!r} is not a known category; read as {_OTHER}")
            return _OTHER
        return category
    gen_ai = a.get(_GEN_AI_OPERATION)  # reported with the other attributes when wrongly typed
    category = _MEMORY_CATEGORIES.get(gen_ai) if isinstance(gen_ai, str) else None
    if raw is not None:  # the span says it is a memory operation: keep it, whatever its category
        category = category or _OTHER
        report(problems, span, _CATEGORY, f"is {a_type(raw)}, not a string; read as {category}")
    elif gen_ai is not None and not isinstance(gen_ai, str):
        text(gen_ai, _GEN_AI_OPERATION, span, problems)  # the span is not read as a memory operation
    return category


def _signal(span: SpanRecord, problems: list[Problem]) -> str | None:
    key = MemTrace.EVALUATION_SIGNAL
    signal = text(span.attributes.get(key), key, span, problems)
    if signal is not None and signal not in _SIGNALS:
        report(problems, span, key, f"{signal[:40]!r} is not one of {', '.join(sorted(_SIGNALS))}; ignored")
        return None
    return signal


def _answer(span: SpanRecord, problems: list[Problem]) -> str | None:
    key = MemTrace.EVALUATION_ANSWER
    answer = text(span.attributes.get(key), key, span, problems)
    if answer is not None:
        try:
            parse_id(answer)
        except MalformedId as error:
            report(problems, span, key, f"ignored: {error}")
            return None
    return answer


def _evaluation(span: SpanRecord, problems: list[Problem]) -> dict[str, Any] | None:
    """The verdict fields of an evaluation span, or None when its verdict is unreadable."""
    a = span.attributes
    passed = verdict(a[_PASSED], _PASSED, span, problems)
    if passed is None:
        return None
    fields: dict[str, Any] = {
        "passed": passed,
        "score": number(a.get(MemTrace.EVALUATION_SCORE), MemTrace.EVALUATION_SCORE, span, problems),
        "signal": _signal(span, problems),
        "evidence": strings(a.get(MemTrace.EVALUATION_EVIDENCE), MemTrace.EVALUATION_EVIDENCE, span,
                            problems),
        "answer": _answer(span, problems),
    }
    for field_name, key in _EVALUATION_TEXTS.items():
        fields[field_name] = text(a.get(key), key, span, problems)
    return fields


_PLAIN = frozenset({str, type(None)})
_HEX = frozenset("0123456789abcdef")
_OPERATION_TEXTS = (_NAME, _OUTCOME, _GEN_AI_OPERATION, _STORE)


def _operation_texts(span: SpanRecord, problems: list[Problem]) -> tuple[str | None, ...]:
    """Name, outcome, GenAI operation and store id: one class test each on the common path."""
    a = span.attributes
    values = name, outcome, gen_ai, store = (a.get(_NAME), a.get(_OUTCOME), a.get(_GEN_AI_OPERATION),
                                             a.get(_STORE))
    plain = _PLAIN
    if (name.__class__ in plain and outcome.__class__ in plain and gen_ai.__class__ in plain
            and store.__class__ in plain):
        return values
    return tuple(text(value, key, span, problems)
                 for value, key in zip(values, _OPERATION_TEXTS, strict=True))


def _operation_attributes(span: SpanRecord, category: str, problems: list[Problem]) -> dict[str, Any]:
    a = span.attributes
    name, outcome, gen_ai, store = _operation_texts(span, problems)
    data: dict[str, Any] = {
        "type": OPERATION, "bipartite": 1, "name": name or span.name, "span_name": span.name,
        "category": category, "trace_id": span.trace_id, "span_id": span.span_id,
        "parent_span_id": span.parent_span_id, "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano, "status": span.status_code, "service": span.service_name,
        "outcome": outcome, "source": span.source, "gen_ai_operation": gen_ai, "store_id": store,
        "content_captured": _VARIABLE_CONTENTS in a,
    }
    if _PASSED in a:
        evaluation = _evaluation(span, problems)
        if evaluation is not None:
            data.update(evaluation)
    return data


def _steps(span: SpanRecord, problems: list[Problem]) -> list[dict[str, Any]]:
    """The ``memtrace.step`` events of a span, their values checked like attributes."""
    steps = []
    for event in span.events:
        # A step naming a stage is that stage's (graph/stages.py), not the span's own.
        if event.name == MemTraceEvent.STEP and MemTraceStage.ID not in event.attributes:
            e = event.attributes
            steps.append({"name": text(e.get(MemTraceStep.NAME), MemTraceStep.NAME, span, problems) or "",
                          "inputs": strings(e.get(MemTraceStep.INPUTS), MemTraceStep.INPUTS, span, problems),
                          "outputs": strings(e.get(MemTraceStep.OUTPUTS), MemTraceStep.OUTPUTS, span,
                                             problems)})
    return steps


# One data dict per edge role, shared by every edge the builder makes (as networkx shares one dict
# between succ[u][v] and pred[v][u]): a 100k-span graph has ~300k such edges, and a dict each was
# ~55 MiB of the build's ~450. Nothing changes an edge's data after the build (G.copy() and
# subgraph(...).copy() copy it); networkx's add_edge on an existing edge would update the shared
# dict, so code adding edges to a built graph adds only new ones (graph/verdicts.py checks first).
_INPUT_EDGE: dict[str, Any] = {"role": "input"}
_OUTPUT_EDGE: dict[str, Any] = {"role": "output"}
_VERSION_EDGE: dict[str, Any] = {"role": "version"}

class _Builder:
    """Accumulates one graph; not thread-safe (one builder per build).

    Nodes and adjacency are collected in the plain dicts a ``networkx.DiGraph`` keeps
    (``_node``, ``_succ``, ``_pred``) and installed in the graph at the end: per-call
    ``add_node``/``add_edge``, and even networkx's bulk calls, cost more than the whole rest
    of the build. The layout is exactly the one ``add_nodes_from`` + ``add_edges_from``
    make: every node in all three dicts in one order, one data dict per edge shared by
    ``succ[u][v]`` and ``pred[v][u]``.
    """

    def __init__(self, content: ContentLookup | None, by_hash: ContentLookup | None = None,
                 failure_rule: FailureRule | None = None) -> None:
        self.problems: list[Problem] = []
        self.failure_rule = failure_rule
        # Failures other tools recorded (graph/verdicts.py): evaluator results found on spans, and
        # evaluation node -> the (trace, span) it judges, whose answer is found once all is read.
        self.evaluator_failures: list[tuple[SpanRecord, EvaluatorVerdict]] = []
        self.targets: dict[str, tuple[str, str]] = {}
        self.content = content
        self.by_hash = by_hash
        self.referenced: set[str] = set()  # variables whose contents spans left in a content store
        self.text_refs: dict[str, dict[str, str]] = {}  # evaluation node -> verdict text field -> hash
        self.nodes: dict[str, dict[str, Any]] = {}
        self.variables: dict[str, dict[str, Any]] = {}  # well-formed variable ids met so far
        self.succ: dict[str, dict[str, dict[str, Any]]] = {}
        self.pred: dict[str, dict[str, dict[str, Any]]] = {}
        self.span_ops: set[tuple[str, str]] = set()
        self.links: list[tuple[str, SpanLink]] = []  # (operation node, link to a producer)
        self.malformed: dict[str, list[MalformedId]] = {}  # of the span being added, by key
        self.genai = GenAICalls()  # the other spans: model calls inside memory operations become steps
        self.foreign: list[SpanRecord] = []  # memory spans of other instrumentations (graph/foreign.py)
        self.packed: list[SpanRecord] = []  # packed mem0 adds: unpacked once all are in (graph/packed.py)
        self.kept: dict[str, str] = {}  # their variables' texts kept in process (content capture off)

    def variable(self, variable_id: str) -> dict[str, Any]:
        """The node data of a variable id; :class:`MalformedId` when the id is not well formed."""
        data = self.variables.get(variable_id)
        if data is None:
            name, sep, version = variable_id.rpartition("@")
            # parse_id's rules, tested inline (hot path); it says why when they do not hold
            if (sep and name and version.isdigit() and version.isascii() and version[0] != "0"
                    and len(version) <= MAX_VERSION_DIGITS):
                number = int(version)
            else:
                name, number = parse_id(variable_id)
            data = self.nodes[variable_id] = self.variables[variable_id] = {
                "type": VARIABLE, "bipartite": 0, "name": name, "version": number,
                "kind": _OTHER_KIND, "hash": "", "size": 0, "content": None, "deleted": False}
            self.succ[variable_id], self.pred[variable_id] = {}, {}
        return data

    def new_variable(self, variable_id: str, span: SpanRecord, key: str) -> bool:
        """Make the node of a variable id met for the first time; False (kept for one report) if malformed."""
        try:
            self.variable(variable_id)
        except MalformedId as error:
            self.malformed.setdefault(key, []).append(error)
            return False
        return True

    def report_malformed(self, span: SpanRecord) -> None:
        """One problem per attribute of ``span`` that held malformed variable ids."""
        for key, errors in self.malformed.items():
            report(self.problems, span, key, f"has {len(errors)} malformed variable id(s), skipped "
                                             f"(first: {errors[0]})")
        self.malformed.clear()

    def describe(self, descriptor: str, content: Any, span: SpanRecord) -> None:
        parts = descriptor.split(" ", 3)
        data = self.variables.get(parts[-1])
        size = parts[1] if len(parts) == 4 else ""
        if data is not None and size.isdigit() and size.isascii() and len(size) <= MAX_VERSION_DIGITS:
            kind, digest = parts[0], parts[2]  # parse_descriptor's rules, for an id already checked
            size_number = int(size)
        else:
            try:
                variable_id, kind, size_number, digest = parse_descriptor(descriptor)
                data = self.variable(variable_id)
            except MalformedId as error:
                report(self.problems, span, _VARIABLES, f"entry skipped: {error}")
                return
        if not data["hash"]:
            known = _KINDS.get(kind)
            if known is None:
                report(self.problems, span, _VARIABLES, f"entry {parts[-1][:80]!r}: kind {kind[:40]!r} "
                                                        f"is not a variable kind; read as {_OTHER_KIND}")
            data["kind"], data["size"], data["hash"] = known or _OTHER_KIND, size_number, digest
        if data["content"] is None and isinstance(content, str):
            data["content"] = content

    def add_span(self, span: SpanRecord) -> None:
        a, problems = span.attributes, self.problems
        if _PACKED in a:  # its messages' versions are the order of all packed adds: read at the end
            self.packed.append(span)
            return
        if _PACKED_SEARCH in a:  # a packed search needs nothing but itself: read as the generic shape now
            span = unpack_search(span, problems)
            a = span.attributes
        if _CATEGORY not in a and is_foreign(a):
            self.foreign.append(span)  # read by its record ids once every span is in (add_foreign)
            return
        category = _category(span, problems)
        if category is None:
            self.genai.add(span)
            if span.events:
                self.evaluator_failure(span)
            return  # not a memory operation: ordinary application spans stay out of the graph
        node = f"op:{span.trace_id}:{span.span_id}"  # operation_node_id, inlined (hot path)
        self.span_ops.add((span.trace_id, span.span_id))
        if node not in self.succ:
            self.succ[node], self.pred[node] = {}, {}
        data = self.nodes[node] = _operation_attributes(span, category, problems)
        self.lineage(node, span)
        if _VARIABLES in a:
            self.describe_all(span)
        if self.by_hash is not None and _CONTENT_REF in a:
            self.references(node, span)
        if _DELETED in a:
            self.tombstones(span)
        if span.links:
            self.links.extend((node, link) for link in span.links)
        if span.events:
            steps = _steps(span, problems)
            if steps:
                data["steps"] = steps
            self.evaluator_failure(span)
            if has_stages(span):
                self.add_stages(node, span)
        if "passed" in data and MemTraceTarget.SPAN_ID in a:
            self.target(node, span)

    def add_stages(self, node: str, span: SpanRecord) -> None:
        """The stages ``span`` records as ``memtrace.stage`` events: each the operation node its own
        span would have made (:mod:`memtrace_otel.graph.stages`), marked ``stage_of`` the span."""
        for stage in stage_records(span, self.problems):
            self.add_span(stage)
            stage_node = f"op:{stage.trace_id}:{stage.span_id}"
            if stage_node in self.nodes:
                self.nodes[stage_node]["stage_of"] = span.span_id
                self.genai.add_stage(node, stage.start_time_unix_nano, stage.end_time_unix_nano, stage_node)

    def evaluator_failure(self, span: SpanRecord) -> None:
        """Keep an evaluator's failing ``gen_ai.evaluation.result`` on ``span`` (made a node at the end)."""
        found = failing_verdict(span, self.failure_rule)
        if found is not None:
            self.evaluator_failures.append((span, found))

    def target(self, node: str, span: SpanRecord) -> None:
        """Remember the span a verdict recorded apart from its answer judges
        (``memtrace.evaluation.target.*``)."""
        a = span.attributes
        trace_id = text(a.get(MemTraceTarget.TRACE_ID), MemTraceTarget.TRACE_ID, span, self.problems)
        span_id = text(a.get(MemTraceTarget.SPAN_ID), MemTraceTarget.SPAN_ID, span, self.problems)
        if not trace_id or not span_id:
            return
        if not (len(trace_id) == 32 and len(span_id) == 16 and all(c in _HEX for c in trace_id + span_id)):
            report(self.problems, span, MemTraceTarget.SPAN_ID, "does not name a span (32 and 16 lowercase "
                                                               "hex digits); the verdict judges no answer")
            return
        self.targets[node] = (trace_id, span_id)

    def add_evaluator_failures(self) -> None:
        """One evaluation node per span an evaluator failed (its first failing result)."""
        for span, found in self.evaluator_failures:
            node = evaluator_node_id(span.trace_id, span.span_id)
            if node in self.nodes:
                continue  # the same span read twice
            self.nodes[node] = evaluator_node(span, found)
            self.succ[node], self.pred[node] = {}, {}
            self.targets[node] = (span.trace_id, span.span_id)

    def lineage(self, node: str, span: SpanRecord) -> None:
        """The input and output edges of operation ``node``; a version written twice is reported."""
        a, problems, succ, pred = span.attributes, self.problems, self.succ, self.pred
        variables, ins = self.variables, pred[node]
        for variable_id in strings(a.get(_INPUTS), _INPUTS, span, problems):
            if variable_id in variables or self.new_variable(variable_id, span, _INPUTS):
                succ[variable_id][node] = ins[variable_id] = _INPUT_EDGE
        outs = succ[node]
        for variable_id in strings(a.get(_OUTPUTS), _OUTPUTS, span, problems):
            if variable_id in variables or self.new_variable(variable_id, span, _OUTPUTS):
                writers = pred[variable_id]
                if writers and node not in writers:
                    self.duplicate(variable_id, next(iter(writers)), span)
                outs[variable_id] = writers[node] = _OUTPUT_EDGE
        if self.malformed:
            self.report_malformed(span)

    def tombstones(self, span: SpanRecord) -> None:
        variables = self.variables
        for variable_id in strings(span.attributes[_DELETED], _DELETED, span, self.problems):
            if variable_id in variables or self.new_variable(variable_id, span, _DELETED):
                variables[variable_id]["deleted"] = True
        if self.malformed:
            self.report_malformed(span)

    def describe_all(self, span: SpanRecord) -> None:
        descriptors = strings(span.attributes[_VARIABLES], _VARIABLES, span, self.problems)
        contents = span.attributes.get(_VARIABLE_CONTENTS)
        if contents is not None and type(contents) is not list:
            report(self.problems, span, _VARIABLE_CONTENTS, f"is {a_type(contents)}, not a list; ignored")
            contents = None
        # Parallel arrays may be short (older writers, hand-made spans): pad with None.
        for descriptor, content in zip(descriptors, chain(contents or (), repeat(None)), strict=False):
            self.describe(descriptor, content, span)

    def references(self, node: str, span: SpanRecord) -> None:
        """Remember what ``span`` left in a content store: its described variables, its verdict texts."""
        a = span.attributes
        descriptors = a.get(_VARIABLES)
        if isinstance(descriptors, (list, tuple)):  # a wrong type was reported by describe_all
            for descriptor in descriptors:
                parts = descriptor.split(" ", 3) if isinstance(descriptor, str) else ()
                if len(parts) == 4:
                    self.referenced.add(parts[3])
        if _TEXTS_REF in a:
            refs = {}
            for ref in strings(a[_TEXTS_REF], _TEXTS_REF, span, self.problems):
                field_name, _, digest = ref.partition(" ")
                if field_name not in EVALUATION_TEXT_FIELDS or not digest:
                    report(self.problems, span, _TEXTS_REF, f"entry {ref[:80]!r} is not "
                                                            "'<field> <hash>'; ignored")
                    continue
                refs[field_name] = digest
            self.text_refs[node] = refs

    def duplicate(self, variable_id: str, other: str, span: SpanRecord) -> None:
        """Two operations wrote one version: say which, keep both edges (the earlier one wins reads)."""
        first = self.nodes[other]
        report(self.problems, span, _OUTPUTS, f"writes {variable_id[:80]!r}, which span {first['span_id']} "
                                              f"({first.get('source') or '?'}) also wrote: a duplicate "
                                              "version")

    def _fill_contents(self) -> None:
        # Spans exported without content, read in the process that made them: the in-process
        # store still has what variables and verdicts said.
        lookup, by_hash, referenced = self.content, self.by_hash, self.referenced
        for node, data in self.nodes.items():
            if data["type"] == VARIABLE:
                if data["content"] is None and lookup is not None:
                    data["content"] = lookup(node) or self.kept.get(node)
                if data["content"] is None and node in referenced and data["hash"]:
                    data["content"] = by_hash(data["hash"])  # type: ignore[misc]  # referenced => by_hash
            elif "passed" in data:
                refs = self.text_refs.get(node, {})
                for field_name in EVALUATION_TEXT_FIELDS:
                    if data.get(field_name) is None and lookup is not None:
                        data[field_name] = lookup(evaluation_text_key(data["span_id"], field_name))
                    if data.get(field_name) is None and field_name in refs:
                        data[field_name] = by_hash(refs[field_name])  # type: ignore[misc]

    def _missing_links(self) -> set[str]:
        # A link to a span that is not here means its trace was not read: the trace backend
        # can be asked for it (Jaeger keeps links as references, without their attributes).
        span_ops, missing = self.span_ops, defaultdict(set)
        # A verdict's link to the span it judges may point at a span that is no operation (the
        # request around the answer): its trace is here when any of its operations is.
        judged = {trace for trace, _ in self.targets.values()}
        if judged:  # present: an operation other than such verdicts was read from it
            judged &= {trace for trace, span in span_ops if f"op:{trace}:{span}" not in self.targets}
        for node, link in self.links:
            if (link.trace_id, link.span_id) not in span_ops and not (
                    node in self.targets and link.trace_id in judged):
                missing[node].add(link.trace_id)
        for node, traces in missing.items():
            self.nodes[node]["missing_links"] = sorted(traces)
        return set().union(*missing.values())

    def add_foreign(self) -> None:
        """Memory spans of other instrumentations, with the lineage their record ids allow
        (:mod:`memtrace_otel.graph.foreign`); those wrapping one of our own operations are the same
        call and are left out."""
        ops = [d for d in self.nodes.values() if d["type"] == OPERATION]
        own = {(d["trace_id"], d["span_id"]) for d in ops}
        own_parents = {(d["trace_id"], d["parent_span_id"]) for d in ops if d.get("parent_span_id")}
        spans, contexts = lineage_spans([s for s in self.foreign if not covered(s, own, own_parents)],
                                        self.problems)
        for span in spans:
            self.add_span(span)
        generations = [(n, d["trace_id"], d["start"] or 0) for n, d in self.nodes.items()
                       if d["type"] == OPERATION and d["category"] == _GENERATION]
        for variable_id, node in search_contexts(contexts, generations):
            self.succ[variable_id][node] = self.pred[node][variable_id] = _INPUT_EDGE

    def add_packed(self) -> None:
        """The packed ``add`` spans as the spans their stage events would have made
        (:mod:`memtrace_otel.graph.packed`), their messages versioned by the order of their starts."""
        spans, self.packed = self.packed, []
        versions, lookup = message_versions(spans), self.content
        for span in spans:
            made: list[str] | None = [] if lookup is not None else None
            self.add_span(unpack(span, versions.get((span.trace_id, span.span_id), {}), self.problems, made))
            if made:  # in-process attribution without content capture: the texts the add kept
                texts = lookup(kept_key(span.trace_id, span.span_id))  # type: ignore[misc]
                if type(texts) is tuple:
                    self.kept.update(zip(made, texts, strict=False))

    def finish(self) -> nx.DiGraph:
        if self.packed:
            self.add_packed()
        if self.foreign:
            self.add_foreign()
        missing = self._missing_links()
        if self.evaluator_failures:
            self.add_evaluator_failures()
        if self.content is not None or self.by_hash is not None:
            self._fill_contents()
        graph = nx.DiGraph(problems=self.problems, missing_traces=missing)
        # networkx's descriptors for these three reset its cached views: the supported way
        # for a builder to install its own dicts.
        graph._node, graph._succ, graph._pred = self.nodes, self.succ, self.pred
        if self.genai:  # before ordering: steps take their place in execution order
            add_genai_steps(graph, self.genai, self.problems)
        self._order_operations()
        resolve_targets(graph, self.targets, self.genai.parents)
        self._version_edges()
        break_cycles(graph, self.problems)
        return graph

    def _order_operations(self) -> None:
        ops = [(d["start"], d["trace_id"], d["span_id"], n) for n, d in self.nodes.items()
               if d["type"] == OPERATION]
        for order, (*_, op_node) in enumerate(sorted(ops)):
            self.nodes[op_node]["order"] = order

    def _version_edges(self) -> None:
        versions: dict[str, list[int]] = defaultdict(list)
        for data in self.variables.values():
            versions[data["name"]].append(data["version"])
        succ, pred = self.succ, self.pred
        for name, found in versions.items():
            if len(found) > 1:
                found.sort()
                for before, after in pairwise(found):  # ids are canonical: both nodes exist
                    source, target = f"{name}@{before}", f"{name}@{after}"
                    if target not in succ[source]:  # an edge already there keeps its role
                        succ[source][target] = pred[target][source] = _VERSION_EDGE


def build_graph(spans: Iterable[SpanRecord], *, content: ContentLookup | None = None,
                content_by_hash: ContentLookup | None = None,
                failure_rule: FailureRule | None = None) -> nx.DiGraph:
    """The memory evolution graph of ``spans`` (any number of traces and files).

    Parameters
    ----------
    spans:
        Span records from any reader, or from live spans.
    content:
        Lookup of variable contents missing from the spans (the in-process
        :class:`~memtrace_otel.instrument.InProcessContents`'s ``get``).
    content_by_hash:
        Lookup of texts by content hash (a
        :class:`~memtrace_otel.content.ContentResolver`'s ``get``): the variables and
        verdict texts of spans that carry ``memtrace.content_ref`` are resolved with it.
    failure_rule:
        What makes an evaluator's ``gen_ai.evaluation.result`` on a span a failure
        (:class:`~memtrace_otel.signals.FailureRule`; by default labels such as ``fail``, or a
        score under ``MEMTRACE_EVALUATION_FAIL_BELOW``, 0.5). Each such span becomes a failed
        evaluation of its own (:mod:`memtrace_otel.graph.verdicts`).

    Returns
    -------
    networkx.DiGraph
        ``G.graph["problems"]`` lists repaired inconsistencies,
        ``G.graph["missing_traces"]`` trace ids whose producers were referenced but not read.

    Examples
    --------
    >>> from memtrace_otel.spans.model import SpanRecord
    >>> span = SpanRecord("a" * 32, "b" * 16, "extract", attributes={
    ...     "memtrace.operation.category": "extraction",
    ...     "memtrace.inputs": ["msg:1@1"], "memtrace.outputs": ["fact:1@1"],
    ...     "memtrace.variables": ["facts 9 a7b6eda801e5347d fact:1@1"]})
    >>> G = build_graph([span])
    >>> sorted(G.successors("msg:1@1"))
    ['op:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:bbbbbbbbbbbbbbbb']
    >>> G.nodes["fact:1@1"]["kind"]
    'facts'
    """
    builder = _Builder(content, content_by_hash, failure_rule)
    with gc_paused():
        for span in spans:
            builder.add_span(span)
        return builder.finish()
