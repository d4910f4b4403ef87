"""EverMemOS as MemBase traces it (``membase/layers/evermemos.py``, ``baselines/evermemos/online_memory/``).

Per message: the message (category ``message``), ``memory_system.message_buffer_update``
(category ``update``, a ``comment_mutation`` of ``message-buffer``) and, from the second
buffered message on, ``evermemos.boundary_detection`` (category ``boundary_detection``):
the buffer is split into ``history_messages`` and ``new_messages`` (edges of category
``split_message_buffer``), a ``time_gap`` and a ``boundary_detection_prompt`` are made,
the LLM's ``raw_boundary_detection_response`` is parsed into a
``boundary_detection_result``, which either closes a scenario (buffer and result ->
``temporary_variable`` memcell) or points at the ``NO_SPLIT`` marker. A memcell becomes
``memory-unit-<event_id>@1`` (category ``memory_entry``) in
``memory_system.finalize_memory_unit`` (category ``initialization``), is enriched in
``memory_system.extract_memory`` (category ``extraction``: episode prompt -> raw
response -> ``episode_memory`` -> ``@2``; event-log prompt -> raw response ->
``event_log`` -> ``@3``; ``@4`` drops the raw ``original_data``; version edges of
category ``mutation``) and the buffer is reset (``update``).

Retrieval is agentic (MemBase's EverMemOS config): ``memory_system.hybrid_retrieval``
(sparse and dense result lists fused), ``memory_system.agentic_round1_bundle`` (a
sufficiency check; when sufficient it returns the memory units), else
``memory_system.agentic_round2_bundle`` (refined queries, their results) and
``memory_system.agentic_final_rerank``, which returns them: several retrieval
operations per question, each of category ``retrieval``.

Faults: an episode (and its event log) written without a fact of the scenario, or a
memcell cut without a message (ExtractionError, in ``extract_memory`` or in
``boundary_detection``); the operation that returns the memory units leaves out the one
holding the evidence (RetrievalError); the reader's mistakes (ResponseError).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from memtrace_bench.membase.common import (
    Entry,
    Fault,
    Outcome,
    Retriever,
    blur,
    construction_session,
    evaluate,
    query_variable,
    rank_key,
    search_session,
)
from memtrace_bench.membase.data import Conversation, Turn
from memtrace_bench.membase.graph import Graph, Var, content_identity, json_encode

__all__ = ["NAME", "TYPES", "plan", "run"]

NAME = "EverMemOS"
TYPES = ("ExtractionError", "RetrievalError", "ResponseError")
MAX_SESSIONS = 8
TOP_K = 10
TOP_N = 20            # candidates per result list (MemBase's config says 50; fewer keeps files small)
SCENARIO = 10         # messages after which the boundary model closes a scenario within a session
_MANAGER = "membase/baselines/evermemos/online_memory/memory_manager.py"
_BOUNDARY = "membase/baselines/evermemos/memory_layer/memcell_extractor/conv_memcell_extractor.py"
_RETRIEVER = "membase/baselines/evermemos/online_memory/retriever.py"

_BOUNDARY_PROMPT = (
    "You are an episodic memory boundary detection expert. Determine whether the new messages start a new "
    "scenario.\n\nConversation history:\n{conversation_history}\n\nTime gap: {time_gap_info}\n\nNew "
    "messages:\n{new_messages}\n\nReturn JSON: {\"reasoning\": ..., \"should_end\": bool, \"should_wait\": "
    "bool, \"confidence\": float, \"topic_summary\": ...}")
_EPISODE_PROMPT = (
    "You are an episodic memory generation expert. Convert the conversation into an episodic memory in the "
    "third person, keeping every concrete fact, name, date and number. Return JSON with title, content and "
    "summary.\n\nConversation start time: {conversation_start_time}\n{conversation}")
_INSTRUCTIONS = "Write the episode as a detailed third-person narrative; keep all facts and time information."
_EVENT_PROMPT = (
    "Extract an event log from the episode: the time and a list of atomic facts, each a complete sentence. "
    "Return JSON: {\"event_log\": {\"time\": ..., \"atomic_fact\": [...]}}.\n\n{input_text}")
_SUFFICIENCY_PROMPT = (
    "You are an expert in information retrieval evaluation. Judge whether the retrieved documents are "
    "sufficient to answer the query. Return JSON: {\"is_sufficient\": bool, \"reasoning\": ..., "
    "\"missing_information\": [...]}\n\nQuery: {query}\n\nDocuments:\n{retrieved_docs}")
_REFINE_PROMPT = (
    "The retrieved documents are insufficient. Generate complementary queries that target the missing "
    "information. Return JSON: {\"queries\": [...]}\n\nOriginal query: {original_query}\n\n{retrieved_docs}")


@dataclass
class _Unit:
    event_id: str
    subject: str
    episode: str
    facts: list[str]
    dias: frozenset[str]
    var: Var
    order: int

    @property
    def text(self) -> str:
        return f"{self.subject}: {self.episode}"


def _record(turn: Turn) -> dict[str, str]:
    return {"content": turn.text, "speaker_id": turn.speaker, "speaker_name": turn.speaker,
            "timestamp": turn.timestamp}


class _Layer:
    def __init__(self, graph: Graph, conversation: Conversation, faults: dict[tuple[str, str], Fault],
                 outcome: Outcome) -> None:
        self.graph, self.conversation, self.faults, self.outcome = graph, conversation, faults, outcome
        self.buffer: list[Turn] = []
        self.buffer_var: Var | None = None
        self.units: list[_Unit] = []
        self.memcell: Var | None = None

    def buffer_value(self) -> str:
        return json_encode([_record(t) for t in self.buffer])

    def add(self, turn: Turn, message: Var) -> None:
        graph = self.graph
        graph.where(_MANAGER)
        if self.buffer_var is None:
            self.buffer_var = graph.variable(
                self.buffer_value(), identity="message-buffer", category="message_buffer",
                comment="A message buffer that stores messages not yet processed by the memory system.")
        self.buffer.append(turn)
        self.buffer_var = graph.mutate(
            self.buffer_var, self.buffer_value(), inputs=[message], mutation_category="update",
            op_name="memory_system.message_buffer_update",
            comment="Add a new input message into the current message buffer.")
        if len(self.buffer) < 2:
            return
        history, new = self.buffer[:-1], self.buffer[-1]
        ends = new.session != history[-1].session or len(history) >= SCENARIO
        kept, fault = self.cut(history) if ends else (history, None)
        op_id = self.boundary(history, kept, new, ends)
        if not ends:
            return
        if fault is not None:
            self.outcome.fired[fault] = op_id
        self.finalize(kept)
        graph.where(_MANAGER)
        self.buffer = [new]
        self.buffer_var = graph.mutate(
            self.buffer_var, self.buffer_value(), inputs=[], mutation_category="update",
            op_name="memory_system.message_buffer_update",
            comment="After the current memory unit is extracted, the memory system resets the message "
                    "buffer by keeping only the newest message.")

    def cut(self, history: list[Turn]) -> tuple[list[Turn], Fault | None]:
        """The messages a closed scenario's memcell keeps: a fault leaves one out (never all)."""
        for turn in history:
            fault = self.faults.get(("memcell", turn.dia_id))
            if fault is not None and len(history) > 1:
                return [t for t in history if t.dia_id != fault.target], fault
        return history, None

    def boundary(self, history: list[Turn], kept: list[Turn], new: Turn, ends: bool) -> str:
        graph = self.graph
        graph.where(_BOUNDARY)
        assert self.buffer_var is not None
        op_id = graph.scope("evermemos.boundary_detection", "boundary_detection",
                            "The memory system detects whether the newly added message starts a new "
                            "scenario.")
        news = graph.variable(json_encode([_record(new)]), identity=content_identity([_record(new)]),
                              category="new_messages", class_name="new_messages")
        graph.link(self.buffer_var, news, category="split_message_buffer")
        past = graph.variable(json_encode([_record(t) for t in history]),
                              identity=content_identity([_record(t) for t in history]),
                              category="history_messages", class_name="history_messages")
        graph.link(self.buffer_var, past, category="split_message_buffer")
        gap = ("The new message arrives in a new session, after a long pause."
               if new.session != history[-1].session else
               "The new message immediately follows the previous message.")
        gap_var = graph.variable(repr(gap), identity=content_identity(gap), category="time_gap",
                                 class_name="time_gap")
        graph.op([past, news], [gap_var])
        template = graph.variable(repr(_BOUNDARY_PROMPT), identity="boundary-detection-prompt-template",
                                  category="prompt")
        text = "\n".join(f"[{t.timestamp}] {t.speaker}: {t.text}" for t in history[-6:])
        prompt_text = _BOUNDARY_PROMPT.replace("{conversation_history}", text).replace(
            "{new_messages}", f"[{new.timestamp}] {new.speaker}: {new.text}").replace("{time_gap_info}", gap)
        prompt = graph.variable(repr(prompt_text), identity=content_identity(prompt_text), category="prompt",
                                class_name="boundary_detection_prompt")
        graph.op([past, news, gap_var, template], [prompt])
        decision = {"reasoning": "The topic changes." if ends else "The same topic continues.",
                    "should_end": ends, "should_wait": not ends, "confidence": 0.9,
                    "topic_summary": history[0].text[:120] if ends else ""}
        raw = json.dumps(decision, ensure_ascii=False)
        raw_var = graph.variable(repr(raw), identity=content_identity(raw), category="llm_response",
                                 class_name="raw_boundary_detection_response")
        graph.link(prompt, raw_var)
        result_text = (f"BoundaryDetectionResult(should_end={ends}, should_wait={not ends}, "
                       f"reasoning={decision['reasoning']!r}, confidence=0.9, "
                       f"topic_summary={decision['topic_summary']!r})")
        result = graph.variable(result_text, identity=content_identity(result_text), category="llm_response",
                                class_name="boundary_detection_result")
        graph.link(raw_var, result)
        if ends:
            self.memcell = graph.variable(
                json_encode({"original_data": [_record(t) for t in kept], "timestamp": kept[-1].timestamp,
                             "summary": decision["topic_summary"]}),
                identity=content_identity([t.dia_id for t in kept]), category="temporary_variable",
                class_name="temporary_variable")
            graph.op([self.buffer_var, result], [self.memcell])
        else:
            marker = graph.variable(repr("NO_SPLIT"), identity=content_identity("NO_SPLIT"),
                                    category="marker", class_name="no_split_marker")
            graph.link(result, marker)
        graph.end_scope()
        return op_id

    def finalize(self, turns: list[Turn]) -> None:
        """``finalize_memory_unit`` then ``extract_memory``: the memcell becomes an enriched memory unit."""
        graph = self.graph
        graph.where(_MANAGER)
        assert self.memcell is not None
        event_id = graph.uuid().replace("-", "")[:24]
        snapshot: dict[str, object] = {
            "original_data": [_record(t) for t in turns], "timestamp": turns[-1].timestamp,
            "event_id": event_id, "episode": None, "subject": None, "summary": None, "foresights": None,
            "event_log": None}
        unit_var = graph.variable(
            json_encode(snapshot), identity=f"memory-unit-{event_id}", category="memory_entry",
            comment="An initial memory-unit created from the temporary memory unit candidate.")
        graph.op([self.memcell], [unit_var], op_name="memory_system.finalize_memory_unit",
                 category="initialization",
                 comment="The memory system finalizes the temporary memory unit candidate into a concrete "
                         "memory unit by assigning a unique event identifier.")
        op_id = graph.scope("memory_system.extract_memory", "extraction",
                            "Run the memory-extraction stage on the initial memory-unit: an episode-level "
                            "narrative memory, then a retrieval-oriented event log.")
        facts: list[tuple[str, str]] = []
        for turn in turns:
            fault = self.faults.get(("episode", turn.dia_id))
            if fault is not None:
                self.outcome.fired[fault] = op_id
                if fault.variant == "lossy":
                    facts.append((fault.text, ""))
                continue
            facts.extend((f.text, turn.dia_id) for f in turn.facts)
        date = turns[-1].timestamp[:10]
        speakers = " and ".join(dict.fromkeys(t.speaker for t in turns))
        subject = f"{speakers} talk on {date}"
        episode = f"On {date}, {speakers} had a conversation. " + " ".join(t for t, _ in facts) \
            if facts else f"On {date}, {speakers} exchanged greetings."
        template = graph.variable(repr(_EPISODE_PROMPT), identity="episode-extraction-prompt-template",
                                  category="prompt")
        instructions = graph.variable(repr(_INSTRUCTIONS), identity="episode-extraction-custom-instructions",
                                      category="prompt")
        conversation = "\n".join(f"[{t.timestamp}] {t.speaker}: {t.text}" for t in turns)
        prompt_text = _EPISODE_PROMPT.replace("{conversation_start_time}", turns[0].timestamp) \
            .replace("{conversation}", conversation)
        prompt = graph.variable(repr(prompt_text), identity=content_identity(prompt_text), category="prompt",
                                class_name="episode_extraction_prompt")
        graph.op([unit_var, instructions, template], [prompt])
        episode_doc = {"title": subject, "content": episode, "summary": episode[:200]}
        raw = json.dumps(episode_doc, ensure_ascii=False)
        raw_var = graph.variable(repr(raw), identity=content_identity(raw), category="llm_response",
                                 class_name="raw_episode_extraction_response")
        graph.link(prompt, raw_var)
        memory = {"subject": subject, "summary": episode[:200] + "...", "episode": episode}
        memory_var = graph.variable(json_encode(memory), identity=content_identity(memory),
                                    category="llm_response", class_name="episode_memory")
        graph.link(raw_var, memory_var)
        snapshot.update(memory)
        unit_var = graph.mutate(
            unit_var, json_encode(snapshot), inputs=[memory_var], mutation_category="mutation",
            comment="The memory system refines the initial memory-unit by writing the extracted "
                    "episode-level narrative memory back into it.")
        event_template = graph.variable(repr(_EVENT_PROMPT), identity="event-log-prompt-template",
                                        category="prompt")
        event_prompt_text = _EVENT_PROMPT.replace("{input_text}", episode)
        event_prompt = graph.variable(repr(event_prompt_text), identity=content_identity(event_prompt_text),
                                      category="prompt", class_name="event_extraction_prompt")
        graph.op([unit_var, event_template], [event_prompt])
        atomic = [t for t, _ in facts] or [f"{speakers} talked."]
        raw = json.dumps({"event_log": {"time": date, "atomic_fact": atomic}}, ensure_ascii=False)
        event_log = {"atomic_fact": atomic}  # the snapshot keeps the facts only (event_log_extractor.py)
        raw_var = graph.variable(repr(raw), identity=content_identity(raw), category="llm_response",
                                 class_name="raw_event_log_extraction_response")
        graph.link(event_prompt, raw_var)
        log_var = graph.variable(json_encode(event_log), identity=content_identity(event_log),
                                 category="llm_response", class_name="event_log")
        graph.link(raw_var, log_var)
        snapshot["event_log"] = event_log
        unit_var = graph.mutate(
            unit_var, json_encode(snapshot), inputs=[log_var], mutation_category="mutation",
            comment="The memory system further refines the current memory-unit by writing the structured "
                    "retrieval-oriented event-log back into the memory-unit.")
        snapshot.pop("original_data")
        unit_var = graph.mutate(
            unit_var, json_encode(snapshot), inputs=[], mutation_category="mutation",
            comment="After memory extraction is complete, the memory system removes the raw original data "
                    "from the current memory-unit and places the final memory unit into the memory store.")
        graph.end_scope()
        self.units.append(_Unit(event_id, subject, episode, [t for t, _ in facts],
                                frozenset(d for _, d in facts if d), unit_var, len(self.units)))


def _results(graph: Graph, units: list[_Unit], order: list[int], scores: dict[int, float], category: str,
             size: int = TOP_N) -> Var:
    """A list-of-results variable as the retriever writes them (identity: event ids and scores)."""
    picked = order[:size]
    docs = [{"event_id": units[i].event_id, "subject": units[i].subject, "episode": units[i].episode,
             "score": round(scores[i], 4)} for i in picked]
    identity = ", ".join(f"{d['event_id']}-{d['score']}" for d in docs) or "empty"
    return graph.variable(json_encode(docs), identity=identity, category=category, class_name=category)


def _retrieve(graph: Graph, layer: _Layer, retriever: Retriever, question_text: str, query: Var,
              fault: Fault | None, outcome: Outcome, seed: str, qid: str) -> list[_Unit]:
    units = layer.units
    order = retriever.rank(question_text)
    scores = {i: float(len(order) - r) for r, i in enumerate(order)}
    graph.where(_RETRIEVER)
    graph.scope("memory_system.hybrid_retrieval", "retrieval",
                "Hybrid retrieval: BM25 and embedding results fused by reciprocal rank fusion.")
    sparse = _results(graph, units, order, scores, "sparse_retrieval_results")
    dense = _results(graph, units, order, scores, "dense_retrieval_results")
    graph.op([query], [sparse])
    graph.op([query], [dense])
    hybrid = _results(graph, units, order, scores, "hybrid_retrieval_results")
    graph.op([sparse, dense], [hybrid])
    graph.end_scope()
    round1 = graph.scope("memory_system.agentic_round1_bundle", "retrieval",
                         "Round 1 of agentic retrieval: rerank the hybrid candidates and check sufficiency.")
    check = _results(graph, units, order, scores, "reranked_for_check", 10)
    graph.link(hybrid, check)
    template = graph.variable(repr(_SUFFICIENCY_PROMPT), identity="sufficiency-check-prompt-template",
                              category="prompt", class_name="sufficiency_check_prompt_template")
    prompt_text = _SUFFICIENCY_PROMPT.replace("{query}", question_text).replace(
        "{retrieved_docs}", "\n".join(units[i].text for i in order[:10]))
    prompt = graph.variable(repr(prompt_text), identity=content_identity(prompt_text), category="prompt",
                            class_name="sufficiency_check_prompt")
    graph.op([query, check, template], [prompt])
    sufficient = rank_key(seed, "sufficient", qid) % 2 == 0
    verdict = json.dumps({"is_sufficient": sufficient, "reasoning": "", "missing_information": []})
    raw = graph.variable(repr(verdict), identity=content_identity(verdict), category="llm_response",
                         class_name="raw_sufficiency_check_response")
    graph.link(prompt, raw)
    result = graph.variable(repr(sufficient), identity=content_identity(verdict),
                            category="sufficiency_check_result", class_name="sufficiency_check_result")
    graph.link(raw, result)
    candidates, sources, op_id = order, [hybrid, check], round1
    if not sufficient:
        graph.end_scope()
        graph.scope("memory_system.agentic_round2_bundle", "retrieval",
                    "Round 2 of agentic retrieval: complementary queries and their candidates.")
        refine = graph.variable(repr(_REFINE_PROMPT), identity="refined-query-prompt-template",
                                category="prompt", class_name="refined_query_prompt_template")
        names = " ".join(dict.fromkeys(w for w in question_text.split() if w[:1].isupper()))
        queries = [question_text, f"{names} {question_text.split(' ', 1)[-1]}".strip()]
        refined = graph.variable(repr(queries), identity=" | ".join(queries), category="refined_queries",
                                 class_name="refined_queries")
        graph.op([query, check, refine], [refined])
        order2 = retriever.rank(queries[1])
        for text in queries:
            one = graph.variable(repr(text), identity=content_identity(text), category="refined_query",
                                 class_name="refined_query")
            graph.link(refined, one)
        scores2 = {i: float(len(order2) - r) for r, i in enumerate(order2)}
        round2 = _results(graph, units, order2, scores2, "round2_retrieval_results")
        graph.op([refined], [round2])
        graph.end_scope()
        op_id = graph.scope("memory_system.agentic_final_rerank", "retrieval",
                            "Merge the Round-1 and Round-2 candidates and rerank them into the final "
                            "results.")
        fused = {i: 1 / (60 + order.index(i)) + 1 / (60 + order2.index(i)) for i in order}
        merged = sorted(order, key=lambda i: (-fused[i], i))
        combined = _results(graph, units, merged, fused, "combined_retrieval_results", 2 * TOP_K)
        graph.op([hybrid, round2], [combined])
        reranked = _results(graph, units, merged, fused, "final_reranked_results", TOP_K)
        graph.link(combined, reranked)
        candidates, sources = merged, [reranked]
    final = candidates[:TOP_K]
    if fault is not None:  # the operation that returns the memory units leaves out the one that held it
        outcome.fired[fault] = op_id
        final = [i for i in candidates if fault.target not in units[i].dias][:TOP_K]
    for i in final:
        graph.op(sources, [units[i].var], comment=f"One memory '{units[i].event_id}' is returned.")
    graph.end_scope()
    return [units[i] for i in final]


def run(graph: Graph, conversation: Conversation, faults: dict[tuple[str, str], Fault], seed: str) -> Outcome:
    outcome = Outcome()
    layer = _Layer(graph, conversation, faults, outcome)
    sessions: dict[int, str] = {}
    for turn in conversation.turns:
        if turn.session not in sessions:
            graph.where("membase/runners/construction.py")
            construction_session(graph, conversation, turn.session, sessions)
        graph.advance(0.2)
        graph.where("membase/layers/evermemos.py")
        message = graph.variable(json_encode({"name": turn.speaker, "role": "user", "content": turn.text,
                                              "timestamp": turn.timestamp}),
                                 identity=turn.message_id, category="message",
                                 comment="An input message fed into the memory pipeline.")
        layer.add(turn, message)
    graph.where("membase/runners/construction.py")
    graph.session("memory_construction", "It is the finalization stage of memory construction.")
    if layer.buffer and layer.buffer_var is not None:
        # flush: the last scenario is closed as if a boundary were detected
        kept, fault = layer.cut(layer.buffer)
        layer.memcell = graph.variable(
            json_encode({"original_data": [_record(t) for t in kept], "timestamp": kept[-1].timestamp}),
            identity=content_identity([t.dia_id for t in kept]), category="temporary_variable",
            class_name="temporary_variable")
        graph.op([layer.buffer_var], [layer.memcell], op_name="evermemos.boundary_detection",
                 category="boundary_detection",
                 comment="The memory system closes the last scenario at the end of the conversation.")
        if fault is not None:
            outcome.fired[fault] = graph.last_op
        layer.finalize(kept)
    outcome.stored = {dia: {u.event_id} for u in layer.units for dia in u.dias}
    search_session(graph, TOP_K)
    retriever = Retriever(u.text for u in layer.units)
    retrievals = {}
    for question in conversation.questions:
        query = query_variable(graph, question)
        hits = _retrieve(graph, layer, retriever, question.question, query,
                         faults.get(("retrieve", question.qid)), outcome, seed, question.qid)
        retrievals[question.qid] = [Entry(u.var.full_name, u.text, u.dias) for u in hits]
    evaluate(graph, conversation, retrievals, faults, outcome)
    return outcome


def plan(conversation: Conversation, clean: Outcome, error_type: str, question: str, target: str,
         used_turns: set[str], seed: str) -> Fault | None:
    if error_type == "ExtractionError":
        choice = rank_key(seed, "variant", question) % 3
        if choice == 0:  # the boundary model cuts the scenario without the message
            return Fault(error_type, ("memcell", target), question, target)
        if choice == 2:
            return Fault(error_type, ("episode", target), question, target, "omit")
        turn = next(t for t in conversation.turns if t.dia_id == target)
        answer = next(q.answer for q in conversation.questions if q.qid == question)
        kept = blur(turn.facts[0].text, [answer, turn.speaker])
        text = f"{turn.speaker} also mentioned something about {kept}."
        return Fault(error_type, ("episode", target), question, target, "lossy", text)
    kind = "retrieve" if error_type == "RetrievalError" else "respond"
    return Fault(error_type, (kind, question), question, target,
                 "refuse" if rank_key(seed, "refuse", question) % 3 == 0 else "")
