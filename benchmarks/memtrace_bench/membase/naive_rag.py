"""NaiveRAG as MemBase traces it (``membase/layers/naive_rag.py``, ``membase/layers/_mixin.py``).

Messages accumulate in ``message-buffer`` (deferred mode, 1,200 tokens, no
overlap: MemBase's ``rag_config.json``). Each message is one
``memory_system.message_buffer_update`` operation of category ``update``: a
``comment_mutation`` ``message-buffer@v`` -> ``@v+1`` with the message as input
and, when the new message would overflow the buffer, the buffered document
(``temporary_variable``, edges of category ``extraction`` from the message and
the buffer snapshot) emitted before the message is added; the document then
becomes ``memory-unit-<id>@1`` (category ``memory_entry``) in its own
``memory_system.add`` operation of category ``update``. The finalization session
flushes the rest the same way. ``retrieve`` is one ``memory_system.retrieve``
operation (category ``retrieval``) with an edge ``query`` -> ``memory-unit-<id>@1``
per hit (top 10 by IDF-weighted word overlap).

Faults: a document emitted without a message it buffered (ExtractionError, in an
operation of category ``update``), a retrieval that leaves out the document
holding the evidence, the reader's mistakes. NaiveRAG never updates or deletes a
memory unit.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtrace_bench.membase.common import (
    Entry,
    Fault,
    Outcome,
    Retriever,
    construction_session,
    evaluate,
    query_variable,
    rank_key,
    search_session,
)
from memtrace_bench.membase.data import Conversation
from memtrace_bench.membase.graph import Graph, Var, content_identity, json_encode

__all__ = ["NAME", "TYPES", "plan", "run"]

NAME = "NaiveRAG"
TYPES = ("ExtractionError", "RetrievalError", "ResponseError")
MAX_SESSIONS = 12
TOP_K = 10
MAX_TOKENS = 1200
_LAYER = "membase/layers/naive_rag.py"


@dataclass
class _Unit:
    ident: str
    text: str
    dias: frozenset[str]
    var: Var
    order: int


def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _snapshot(buffer: list[tuple[str, str]]) -> str:
    return json_encode({"message_buffer": [t for _, t in buffer],
                        "buffer_total_tokens": sum(_tokens(t) for _, t in buffer)})


class _Layer:
    def __init__(self, graph: Graph, faults: dict[tuple[str, str], Fault], outcome: Outcome) -> None:
        self.graph, self.faults, self.outcome = graph, faults, outcome
        self.buffer: list[tuple[str, str]] = []
        self.units: list[_Unit] = []

    def emit(self, inputs: list[Var], op_id: str) -> None:
        """The buffered document, with a fault's message left out, becomes a memory unit."""
        kept = []
        for dia, text in self.buffer:
            fault = self.faults.get(("emit", dia))
            if fault is not None:
                self.outcome.fired[fault] = op_id
                continue
            kept.append((dia, text))
        document = "\n".join(t for _, t in kept)
        graph = self.graph
        doc = graph.variable(repr(document), identity=content_identity(document),
                             category="temporary_variable", class_name="temporary_variable",
                             comment="A temporary variable that holds the buffered document emitted from the "
                                     "message buffer.")
        graph.op(inputs, [doc], category="extraction", comment="The new input message joins the previous "
                 "message buffer state to produce a buffered document.")
        ident = graph.uuid()
        var = graph.variable(json_encode({"content": document, "id": ident}), identity=f"memory-unit-{ident}",
                             category="memory_entry")
        graph.op([doc], [var], op_name="memory_system.add", category="update",
                 comment="The buffered document is embedded into a memory unit. The memory unit is added "
                         "into the memory store.")
        self.units.append(_Unit(ident, document, frozenset(d for d, _ in kept), var, len(self.units)))


def run(graph: Graph, conversation: Conversation, faults: dict[tuple[str, str], Fault], seed: str) -> Outcome:
    outcome = Outcome()
    layer = _Layer(graph, faults, outcome)
    graph.where(_LAYER)
    sessions: dict[int, str] = {}
    for turn in conversation.turns:
        if turn.session not in sessions:
            construction_session(graph, conversation, turn.session, sessions)
        graph.advance(0.2)
        line = f"Speaker {turn.speaker} (role: user) says: {turn.text}\nTimestamp: {turn.timestamp}"
        message = graph.variable(json_encode({"content": line, "name": turn.speaker, "role": "user",
                                              "timestamp": turn.timestamp}),
                                 identity=turn.message_id, category="message",
                                 comment="An input message fed into the memory pipeline.")
        before = graph.variable(_snapshot(layer.buffer), identity="message-buffer",
                                category="message_buffer",
                                comment="A message buffer that stores messages not yet processed by the "
                                        "memory system.")
        op_id = graph.scope("memory_system.message_buffer_update", "update",
                            "Merge a new input message into the current message buffer and, when the buffer "
                            "is ready, emit a memory unit that aggregates recent messages.")
        full = layer.buffer and sum(_tokens(t) for _, t in layer.buffer) + _tokens(line) > MAX_TOKENS
        emitted = list(layer.buffer) if full else None
        layer.buffer = [] if full else layer.buffer
        layer.buffer = [*layer.buffer, (turn.dia_id, line)]
        graph.mutate(before, _snapshot(layer.buffer), inputs=[message], mutation_category="update",
                     comment="Add a new input message into the current message buffer.")
        if emitted is not None:
            current, layer.buffer = layer.buffer, emitted
            layer.emit([message, before], op_id)
            layer.buffer = current
        graph.end_scope()
    graph.session("memory_construction", "It is the finalization stage of memory construction.")
    if layer.buffer:
        before = graph.variable(_snapshot(layer.buffer), identity="message-buffer", category="message_buffer")
        op_id = graph.scope("memory_system.message_buffer_update", "update",
                            "Finalize the current message buffer at the end of the conversation.")
        layer.emit([before], op_id)
        layer.buffer = []
        graph.mutate(before, _snapshot(layer.buffer), inputs=[], mutation_category="update",
                     comment="After the remaining messages are flushed into a buffered document, the memory "
                             "system clears the message buffer.")
        graph.end_scope()
    outcome.stored = {dia: {u.ident} for u in layer.units for dia in u.dias}
    search_session(graph, TOP_K)
    graph.where(_LAYER)
    retriever = Retriever(u.text for u in layer.units)
    retrievals = {}
    for question in conversation.questions:
        query = query_variable(graph, question)
        ranked = [layer.units[i] for i in retriever.rank(question.question)]
        fault = faults.get(("retrieve", question.qid))
        op_id = graph.scope("memory_system.retrieve", "retrieval",
                            f"A task query searches the memory store for top-{TOP_K} relevant memories.")
        if fault is not None:
            outcome.fired[fault] = op_id
            ranked = [u for u in ranked if fault.target not in u.dias]
        hits = ranked[:TOP_K]
        for unit in hits:
            graph.op([query], [unit.var],
                     comment=f"One memory '{unit.ident}' is retrieved from the memory store.")
        graph.end_scope()
        retrievals[question.qid] = [Entry(u.var.full_name, u.text, u.dias) for u in hits]
    evaluate(graph, conversation, retrievals, faults, outcome)
    return outcome


def plan(conversation: Conversation, clean: Outcome, error_type: str, question: str, target: str,
         used_turns: set[str], seed: str) -> Fault | None:
    if error_type == "ExtractionError":
        return Fault(error_type, ("emit", target), question, target)
    kind = "retrieve" if error_type == "RetrievalError" else "respond"
    return Fault(error_type, (kind, question), question, target,
                 "refuse" if rank_key(seed, "refuse", question) % 3 == 0 else "")
