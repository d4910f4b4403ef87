"""Mem0 as MemBase traces it (``membase/layers/mem0.py``, ``membase/baselines/mem0/memory/main.py``).

Per message, MemBase's vendored mem0 writes:

* the message ``U<n>:<dia>`` (category ``message``; JSON of content, name, role, timestamp);
* ``memory_system.extract_facts`` (category ``extraction``): the message and the
  ``fact-extraction-system-prompt`` -> ``raw_fact_extraction_response`` ->
  ``fact_extraction_response_with_code_block_removing`` -> ``extracted_facts``
  (every ``llm_response``; identities are content hashes, so every message without
  facts shares one raw response node);
* ``memory_system.update_memory_decision`` (category ``update``), one operation for
  all of mem0's decision: extracted facts, ``existing_memories`` (only a count) and
  the ``memory-update-decision-prompt`` -> ``memory_update_task_instruction`` ->
  ``raw_memory_update_decision`` -> ... -> ``update_action``; then per action an ADD
  (``update_action`` -> ``memory-unit-<id>@1``, category ``memory_entry``), an UPDATE
  (``comment_mutation`` with ``reuse_op``: ``memory-unit-<id>@v`` -> ``@v+1`` and
  ``update_action`` -> ``@v+1``, edges ``llm_response``) or a DELETE
  (``memory-unit-<id>@v`` -> the ``delete_marker`` ``"DELETED"``, one node for all).

Search: ``memory_system.search_vector_store`` (category ``retrieval``), one edge
``query`` -> ``memory-unit-<id>@v`` per hit, re-writing the stored node. The
simplified run: facts are the turn's LoCoMo observations; the decision merges a
fact into a similar memory of the same speaker (UPDATE), sometimes replaces a
loosely similar one (DELETE + ADD), else ADDs; search ranks live memories by
IDF-weighted word overlap, top 10.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

from memtrace_bench.membase.common import (
    Entry,
    Fault,
    Outcome,
    Retriever,
    blur,
    carries,
    construction_session,
    evaluate,
    query_variable,
    rank_key,
    search_session,
    similarity,
)
from memtrace_bench.membase.data import Conversation, Turn
from memtrace_bench.membase.graph import Graph, Var, content_identity, json_encode

__all__ = ["NAME", "TYPES", "plan", "run"]

NAME = "Mem0"
TYPES = ("ExtractionError", "UpdateError", "DeletionError", "RetrievalError", "ResponseError")
MAX_SESSIONS = 16
TOP_K = 10
_MAIN = "membase/baselines/mem0/memory/main.py"
_MERGE, _REPLACE = 0.3, 0.18

_EXTRACTION_PROMPT = (
    "You are a Personal Information Organizer, specialized in accurately storing facts, user memories, and "
    "preferences. Your primary role is to extract relevant pieces of information from conversations and "
    "organize them into distinct, manageable facts. [...] Return the facts and preferences in a json format "
    "as shown above: {\"facts\": [...]}.")
_UPDATE_PROMPT = (
    "You are a smart memory manager which controls the memory of a system. You can perform four operations: "
    "(1) add into the memory, (2) update the memory, (3) delete from the memory, and (4) no change. Based on "
    "the above four operations, the memory will change. Compare newly retrieved facts with the existing "
    "memory. For each new fact, decide whether to: ADD, UPDATE, DELETE or NONE. [...]")


@dataclass
class _Memory:
    ident: str
    speaker: str
    text: str
    dias: set[str]
    timestamp: str
    var: Var
    order: int


@dataclass
class _Store:
    memories: dict[str, _Memory] = field(default_factory=dict)
    created: int = 0

    def alive(self) -> list[_Memory]:
        return sorted(self.memories.values(), key=lambda m: m.order)

    def carrying(self, dia: str) -> _Memory | None:
        return next((m for m in self.alive() if dia in m.dias), None)


def _snapshot(memory: _Memory) -> str:
    return json_encode({"id": memory.ident, "memory": memory.text, "timestamp": memory.timestamp})


@lru_cache(maxsize=1 << 14)
def _message_value(turn: Turn) -> str:
    content = (f"{turn.text}\nBelow is this message's metadata:\nSpeaker Name: {turn.speaker}\n"
               "Speaker Role: user\n")
    return json_encode({"content": content, "name": turn.speaker, "role": "user",
                        "timestamp": turn.timestamp})


def _message(graph: Graph, turn: Turn) -> Var:
    return graph.variable(_message_value(turn), identity=turn.message_id, category="message",
                          comment="An input message fed into the memory pipeline.")


def _extract(graph: Graph, turn: Turn, message: Var, fault: Fault | None,
             outcome: Outcome) -> tuple[list[tuple[str, str]], Var]:
    """``memory_system.extract_facts``: the turn's facts as ``(text, dia)``; a fault drops or blurs them."""
    facts = [(f.text, turn.dia_id) for f in turn.facts]
    prompt = graph.variable(repr(_EXTRACTION_PROMPT), identity="fact-extraction-system-prompt",
                            category="prompt")
    op_id = graph.scope("memory_system.extract_facts", "extraction",
                        "Extract facts from a conversation snippet using an LLM.")
    if fault is not None:
        outcome.fired[fault] = op_id
        # omitted: the model returns no fact; lossy: a fact that keeps the topic and loses what was said
        facts = [] if fault.variant == "omit" else [(fault.text, "")]
    raw = json.dumps({"facts": [text for text, _ in facts]}, ensure_ascii=False)
    raw_var = graph.variable(repr(raw), identity=content_identity(raw), category="llm_response",
                             class_name="raw_fact_extraction_response")
    graph.link(message, raw_var)
    graph.link(prompt, raw_var)
    cleaned = graph.variable(repr(raw), identity=content_identity(raw), category="llm_response",
                             class_name="fact_extraction_response_with_code_block_removing")
    graph.link(raw_var, cleaned)
    facts_var = graph.variable(repr([text for text, _ in facts]), identity=content_identity(raw),
                               category="llm_response", class_name="extracted_facts")
    graph.link(cleaned, facts_var)
    graph.end_scope()
    return facts, facts_var


def _decide(graph: Graph, turn: Turn, facts: list[tuple[str, str]], facts_var: Var, store: _Store,
            fault: Fault | None, seed: str, outcome: Outcome) -> None:
    """``memory_system.update_memory_decision``: one operation that adds, updates and deletes."""
    op_id = graph.scope("memory_system.update_memory_decision", "update",
                        "Decide how to update the memory store using a large language model.")
    if not facts:
        actions = graph.variable("{}", identity=content_identity({}), category="llm_response",
                                 class_name="update_action")
        graph.link(facts_var, actions, comment="No new facts are extracted from the conversation snippet, so "
                                               "the memory update actions are empty.")
        graph.end_scope()
        return
    mine = [m for m in store.alive() if m.speaker == turn.speaker]
    plan: list[tuple[str, _Memory | None, str, str]] = []  # event, memory, text, dia
    target = store.carrying(fault.target) if fault is not None else None
    if fault is not None and target is not None:
        outcome.fired[fault] = op_id
        if fault.error_type == "UpdateError":  # the wrong, merely similar memory is overwritten
            text, dia = facts[0]
            plan.append(("UPDATE", target, text, dia))
            facts = facts[1:]
        else:
            plan.append(("DELETE", target, target.text, ""))
    for text, dia in facts:
        touched = {id(m) for _, m, _, _ in plan if m is not None}
        scored = sorted(((similarity(text, m.text), -m.order, m) for m in mine
                         if m is not target and id(m) not in touched),
                        key=lambda x: (x[0], x[1]), reverse=True)
        best = scored[0] if scored else None
        if best and best[0] >= _MERGE and len(best[2].dias) < 3:
            plan.append(("UPDATE", best[2], f"{best[2].text.rstrip('.')}; {text}", dia))
        elif best and best[0] >= _REPLACE and rank_key(seed, "replace", dia) % 4 == 0:
            plan.append(("DELETE", best[2], best[2].text, ""))
            plan.append(("ADD", None, text, dia))
        else:
            plan.append(("ADD", None, text, dia))
    _trace_decision(graph, turn, facts_var, store, plan, target if fault else None)
    graph.end_scope()


def _trace_decision(graph: Graph, turn: Turn, facts_var: Var, store: _Store,
                    plan: list[tuple[str, _Memory | None, str, str]], overwritten: _Memory | None) -> None:
    actions = _trace_actions(graph, turn, facts_var, store, plan) if graph.recording else facts_var
    for event, memory, text, dia in plan:
        if event == "ADD":
            store.created += 1
            ident = graph.uuid()
            new = _Memory(ident, turn.speaker, text, {dia} if dia else set(), turn.timestamp,
                          Var("", f"memory-unit-{ident}", 1, ""), store.created)
            if graph.recording:
                new.var = graph.variable(_snapshot(new), identity=f"memory-unit-{ident}",
                                         category="memory_entry",
                                         comment="A memory unit in the memory system.")
                graph.link(actions, new.var, comment=f"a new memory entry '{ident}' is created and added to "
                           "the memory store.")
            store.memories[ident] = new
        elif event == "UPDATE" and memory is not None:
            memory.text, memory.timestamp = text, turn.timestamp
            memory.dias = ({dia} if dia else set()) if memory is overwritten else memory.dias | ({dia} - {""})
            if graph.recording:
                memory.var = graph.mutate(memory.var, _snapshot(memory), inputs=[actions],
                                          mutation_category="llm_response",
                                          comment=f"an existing memory unit '{memory.ident}' is updated.")
        elif event == "DELETE" and memory is not None:
            if graph.recording:
                marker = graph.variable(repr("DELETED"), identity=content_identity("DELETED"),
                                        category="marker", class_name="delete_marker",
                                        comment="It marks the memory unit is deleted successfully.")
                graph.link(memory.var, marker,
                           comment=f"The memory unit '{memory.ident}' is deleted successfully.")
            del store.memories[memory.ident]


def _trace_actions(graph: Graph, turn: Turn, facts_var: Var, store: _Store,
                   plan: list[tuple[str, _Memory | None, str, str]]) -> Var:
    """The decision's LLM steps: the instruction, the raw decision, the parsed ``update_action``."""
    old = [m for m in store.alive() if m.speaker == turn.speaker][-5:]
    temp = {m.ident: str(i) for i, m in enumerate(old)}
    for _, memory, _, _ in plan:
        if memory is not None and memory.ident not in temp:
            temp[memory.ident] = str(len(temp))
    custom = graph.variable(repr(_UPDATE_PROMPT), identity="memory-update-decision-prompt", category="prompt")
    found = f"Find {len(temp)} existing memories similar to the new extracted facts."
    existing = graph.variable(repr(found), identity=content_identity(found), category="similar_memories",
                              class_name="existing_memories")
    old_json = [{"id": temp[m.ident], "text": m.text} for m in old]
    new_facts = json.dumps([t for e, _, t, _ in plan if e != "DELETE"], ensure_ascii=False)
    prompt_text = f"{_UPDATE_PROMPT}\n\nOld Memory: {json.dumps(old_json, ensure_ascii=False)}\n\n" \
                  f"Retrieved facts: {new_facts}"
    prompt = graph.variable(repr(prompt_text), identity=content_identity(prompt_text), category="prompt",
                            class_name="memory_update_task_instruction")
    for source in (facts_var, existing, custom):
        graph.link(source, prompt)
    decision = {"memory": [{"id": temp[m.ident] if m else str(len(temp) + i), "text": text, "event": event,
                            **({"old_memory": m.text} if event == "UPDATE" and m else {})}
                           for i, (event, m, text, _) in enumerate(plan)]}
    raw = json.dumps(decision, ensure_ascii=False)
    raw_var = graph.variable(repr(raw), identity=content_identity(raw), category="llm_response",
                             class_name="raw_memory_update_decision")
    graph.link(prompt, raw_var)
    cleaned = graph.variable(repr(raw), identity=content_identity(raw), category="llm_response",
                             class_name="memory_update_decision_with_code_block_removing")
    graph.link(raw_var, cleaned)
    actions = graph.variable(json_encode(decision), identity=content_identity(decision),
                             category="llm_response", class_name="update_action")
    graph.link(cleaned, actions)
    return actions


def run(graph: Graph, conversation: Conversation, faults: dict[tuple[str, str], Fault], seed: str) -> Outcome:
    """One traced run: construction, search, evaluation; faults change the operations they name."""
    outcome = Outcome()
    store = _Store()
    graph.where(_MAIN)
    sessions: dict[int, str] = {}
    for turn in conversation.turns:
        if turn.session not in sessions:
            construction_session(graph, conversation, turn.session, sessions)
        graph.advance(0.2)
        message = _message(graph, turn)
        facts, facts_var = _extract(graph, turn, message, faults.get(("extract", turn.dia_id)), outcome)
        _decide(graph, turn, facts, facts_var, store, faults.get(("decide", turn.dia_id)), seed, outcome)
    graph.session("memory_construction", "It is the finalization stage of memory construction.")
    outcome.stored = {dia: {m.text} for m in store.alive() for dia in m.dias}
    search_session(graph, TOP_K)
    graph.where(_MAIN)
    alive = store.alive()
    retriever = Retriever(m.text for m in alive)
    retrievals: dict[str, list[Entry]] = {}
    for question in conversation.questions:
        query = query_variable(graph, question)
        ranked = [alive[i] for i in retriever.rank(question.question)]
        fault = faults.get(("retrieve", question.qid))
        op_id = graph.scope("memory_system.search_vector_store", "retrieval",
                            f"A task query searches the memory store for top-{TOP_K} relevant memories.")
        if fault is not None:
            outcome.fired[fault] = op_id
            ranked = [m for m in ranked if fault.target not in m.dias]  # the one that held it is not returned
        hits = ranked[:TOP_K]
        for memory in hits:
            graph.op([query], [memory.var],
                     comment=f"One memory '{memory.ident}' is retrieved from the memory store.")
        graph.end_scope()
        retrievals[question.qid] = [Entry(m.var.full_name, f"Memory: {m.text}\nTime: {m.timestamp}",
                                          frozenset(m.dias)) for m in hits]
    evaluate(graph, conversation, retrievals, faults, outcome)
    return outcome


def plan(conversation: Conversation, clean: Outcome, error_type: str, question: str, target: str,
         used_turns: set[str], seed: str) -> Fault | None:
    """A fault of ``error_type`` aimed at evidence turn ``target`` of ``question``, or ``None``."""
    turn = next(t for t in conversation.turns if t.dia_id == target)
    answer = next(q.answer for q in conversation.questions if q.qid == question)
    if error_type == "ExtractionError":
        if rank_key(seed, "variant", question) % 2:
            return Fault(error_type, ("extract", target), question, target, "omit")
        text = f"{turn.speaker} talked about {blur(turn.facts[0].text, [answer, turn.speaker])}."
        return Fault(error_type, ("extract", target), question, target, "lossy", text)
    if error_type in ("RetrievalError", "ResponseError"):
        kind = "retrieve" if error_type == "RetrievalError" else "respond"
        return Fault(error_type, (kind, question), question, target,
                     "refuse" if rank_key(seed, "refuse", question) % 3 == 0 else "")
    held = next(iter(sorted(clean.stored.get(target, set()))), None)
    if held is None:
        return None
    # the decision of a later turn of the same speaker mistakes the memory for a similar one
    order = [t.dia_id for t in conversation.turns]
    later = [t for t in conversation.turns[order.index(target) + 1:]
             if t.facts and t.speaker == turn.speaker and t.dia_id not in used_turns
             and not carries(t.facts[0].text, answer)]
    if not later:
        return None
    site = max(later, key=lambda t: (similarity(t.facts[0].text, held), -order.index(t.dia_id)))
    return Fault(error_type, ("decide", site.dia_id), question, target)
