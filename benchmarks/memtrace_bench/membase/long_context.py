"""Long-Context as MemBase traces it (``membase/layers/long_context.py``).

The whole history is one memory unit, ``memory-unit`` (category ``memory_entry``,
its value the buffered document itself). Each message is merged into it by a
``comment_mutation`` named ``memory_system.memory_update`` of category ``update``:
``memory-unit@v`` -> ``@v+1`` and the message -> ``@v+1``. ``retrieve`` is one
``memory_system.retrieve`` operation (category ``retrieval``): ``query`` ->
``memory-unit@N``, the whole history, whatever ``k`` is. There are no
deletions and no retrieval choices, so the faults are a merge that loses the new
message (the information never reaches memory: ExtractionError, though the
operation's category is ``update``), a later merge that loses an earlier
message (UpdateError) and the reader's mistakes (ResponseError).
"""

from __future__ import annotations

from memtrace_bench.membase.common import (
    Entry,
    Fault,
    Outcome,
    blur,
    construction_session,
    evaluate,
    query_variable,
    rank_key,
    search_session,
)
from memtrace_bench.membase.data import Conversation
from memtrace_bench.membase.graph import Graph, json_encode

__all__ = ["NAME", "TYPES", "plan", "run"]

NAME = "Long-Context"
TYPES = ("ExtractionError", "UpdateError", "ResponseError")
MAX_SESSIONS = 6
TOP_K = 10
CONTEXT_WINDOW = 32768  # tokens, MemBase's long_context_config.json
_LAYER = "membase/layers/long_context.py"


def _line(speaker: str, text: str, timestamp: str) -> str:
    return f"Speaker {speaker} (role: user) says: {text}\nTimestamp: {timestamp}"


def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


def run(graph: Graph, conversation: Conversation, faults: dict[tuple[str, str], Fault], seed: str) -> Outcome:
    outcome = Outcome()
    graph.where(_LAYER)
    buffer: list[tuple[str, str]] = []  # (dia carried or "", line)
    sessions: dict[int, str] = {}
    unit = None
    for turn in conversation.turns:
        if turn.session not in sessions:
            construction_session(graph, conversation, turn.session, sessions)
        graph.advance(0.2)
        line = _line(turn.speaker, turn.text, turn.timestamp)
        message = graph.variable(json_encode({"content": line, "name": turn.speaker, "role": "user",
                                              "timestamp": turn.timestamp}),
                                 identity=turn.message_id, category="message",
                                 comment="An input message fed into the memory pipeline.")
        if unit is None:
            unit = graph.variable("", identity="memory-unit", category="memory_entry",
                                  comment="A memory unit of the memory system.")
        fault = faults.get(("merge", turn.dia_id))
        entry = (turn.dia_id, line)
        if fault is not None and fault.error_type == "ExtractionError":
            # the message is cut to its first words (lossy) or lost (omitted) on its way into the buffer
            lossy = fault.variant == "lossy"
            entry = ("", _line(turn.speaker, fault.text, turn.timestamp)) if lossy else ("", "")
        merged = [e for e in buffer if not (fault is not None and fault.error_type == "UpdateError"
                                            and e[0] == fault.target)]
        if entry[1]:
            merged.append(entry)
        while sum(_tokens(t) for _, t in merged) > CONTEXT_WINDOW and merged:
            merged.pop(0)  # the oldest messages are trimmed to the window
        buffer = merged
        unit = graph.mutate(unit, "\n".join(t for _, t in buffer), inputs=[message],
                            mutation_category="update", op_name="memory_system.memory_update",
                            comment="Merge a new input message into the memory unit. If the resulting token "
                                    "count exceeds the max-token budget, the oldest messages are trimmed.")
        if fault is not None:
            outcome.fired[fault] = graph.last_op
    graph.session("memory_construction", "It is the finalization stage of memory construction.")
    outcome.stored = {dia: {"memory-unit"} for dia, _ in buffer if dia}
    search_session(graph, TOP_K)
    graph.where(_LAYER)
    history = "\n".join(t for _, t in buffer)
    held = frozenset(d for d, _ in buffer if d)
    formatted = ("The following content enclosed in <long_context_memory> tags is the user's historical "
                 f"interaction trajectory so far:\n<long_context_memory>\n{history}\n</long_context_memory>\n"
                 "This interaction trajectory is your long-term memory.")
    retrievals = {}
    for question in conversation.questions:
        query = query_variable(graph, question)
        memory = graph.variable(history, identity="memory-unit", category="memory_entry")
        graph.op([query], [memory], op_name="memory_system.retrieve", category="retrieval",
                 comment=f"A task query searches the memory store for top-{TOP_K} relevant memories.")
        retrievals[question.qid] = [Entry("memory-unit", formatted, held)]
    evaluate(graph, conversation, retrievals, faults, outcome)
    return outcome


def plan(conversation: Conversation, clean: Outcome, error_type: str, question: str, target: str,
         used_turns: set[str], seed: str) -> Fault | None:
    if error_type == "ExtractionError":
        if rank_key(seed, "variant", question) % 2:
            return Fault(error_type, ("merge", target), question, target, "omit")
        turn = next(t for t in conversation.turns if t.dia_id == target)
        answer = next(q.answer for q in conversation.questions if q.qid == question)
        return Fault(error_type, ("merge", target), question, target, "lossy",
                     blur(turn.text, [answer, turn.speaker]) + " ...")
    if error_type == "ResponseError":
        return Fault(error_type, ("respond", question), question, target,
                     "refuse" if rank_key(seed, "refuse", question) % 3 == 0 else "")
    # a later merge, in a later session, rewrites the history without the target message
    order = [t.dia_id for t in conversation.turns]
    session = conversation.turns[order.index(target)].session
    later = [t.dia_id for t in conversation.turns if t.session > session and t.dia_id not in used_turns]
    if not later:
        return None
    site = min(later, key=lambda d: rank_key(seed, "site", question, d))
    return Fault(error_type, ("merge", site), question, target)
