"""What MemBase's four traced systems share: its search and evaluation runners, faults, outcomes.

The search runner (``membase/runners/search.py``) records each question as
``query:<qa id>`` (category ``message & query``) and calls the layer's
``retrieve``; the evaluation runner (``membase/runners/evaluation.py``) writes,
per question, one ``question-answering`` operation of category ``evaluation``
(retrieved memories -> ``context``; question, context, prompt -> ``prediction``),
and the LLM judge (``membase/evaluation/llm_judge.py``) one ``llm-judge``
operation of category ``evaluation`` (question, golden answers, judge prompt,
prediction -> ``judge_response`` -> ``judge_score``). Both are reproduced here
call for call.

A simplified run tracks which turns' information each memory holds (the
``dias`` of a memory, a context), so whether an answer can be right is known
exactly: the reader answers the gold answer when its context holds every
evidence turn's information, else it says it does not know. A fault changes one
operation; :class:`Outcome` records which operation each fault happened in
(its label) and which questions passed.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from memtrace_bench.membase.data import Conversation, Question
from memtrace_bench.membase.graph import Graph, Var, content_identity

__all__ = [
    "ERROR_TYPES",
    "Entry",
    "Fault",
    "Outcome",
    "Retriever",
    "blur",
    "carries",
    "distinctive",
    "evaluate",
    "rank_key",
    "search_session",
    "similarity",
    "tokens",
]

ERROR_TYPES = ("ExtractionError", "UpdateError", "DeletionError", "RetrievalError", "ResponseError")
UNKNOWN = "I don't know."

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset((
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "because", "been", "before", "being", "between", "both", "but", "by", "can", "could", "did",
    "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have",
    "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in",
    "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not",
    "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over",
    "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them",
    "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
    "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "really", "like",
    "get", "got", "go", "going", "went", "one", "new", "recently"))

_QA_TEMPLATE = (
    "You are an intelligent memory assistant tasked with retrieving accurate information from conversation "
    "memories.\n\n# CONTEXT:\nYou have access to memories from a conversation. These memories contain "
    "timestamped information that may be relevant to answering the question.\n\n# INSTRUCTIONS:\n"
    "1. Carefully analyze all provided memories\n2. If the memories contain contradictory information, "
    "prioritize the most recent memory\n3. Answer in less than 5-6 words.\n4. If the memories do not "
    "contain the answer, say \"I don't know.\"\n\nMemories:\n\n$context\n\nQuestion: $question\n\nAnswer:")
_JUDGE_TEMPLATE = (
    "Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the "
    "following data: (1) a question (posed by one user to another user), (2) a 'gold' (ground truth) "
    "answer, (3) a generated answer which you will score as CORRECT/WRONG.\n\nQuestion: $question\n"
    "Gold answer: $golden_answers\nGenerated answer: $prediction\n\nFirst, provide a short (one sentence) "
    "explanation of your reasoning, then finish with CORRECT or WRONG.")


def tokens(text: str) -> list[str]:
    """Content words, lower-cased, with a crude plural/tense stem (enough for a simplified retriever)."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in _STOP:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 3 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        out.append(word)
    return out


@lru_cache(maxsize=1 << 16)
def word_set(text: str) -> frozenset[str]:
    return frozenset(tokens(text))


def carries(text: str, answer: str) -> bool:
    """Whether ``text`` says every content word of ``answer`` (a fault must not leave the answer behind)."""
    words = word_set(answer)
    return bool(words) and words <= word_set(text)


def blur(text: str, avoid: Iterable[str], keep: int = 3) -> str:
    """The first ``keep`` content words of ``text`` that say none of the words of ``avoid`` (a question's
    answer, a speaker's name): what a lossy extraction keeps of a statement."""
    banned = frozenset().union(*(word_set(a) for a in avoid))
    kept = [w for w in re.findall(r"[A-Za-z0-9']+", text) if word_set(w) and not word_set(w) & banned]
    return " ".join(kept[:keep]) or "something"


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of content words (mem0's "similar memory", simplified)."""
    x, y = word_set(a), word_set(b)
    return len(x & y) / len(x | y) if x and y else 0.0


DISTINCT = 0.3


def distinctive(conversation: Conversation, question: Question) -> bool:
    """Whether no turn outside the question's evidence states something close to its evidence (word overlap
    below :data:`DISTINCT`). The simplified runs track information by turn; where another turn says nearly
    the same (the same support group, the same day), a real reader could answer from it, and one fault
    would not be the answer's single cause: such questions get no fault."""
    evidence = set(question.evidence)
    own = [f.text for t in conversation.turns if t.dia_id in evidence for f in t.facts]
    return all(similarity(a, f.text) < DISTINCT for t in conversation.turns if t.dia_id not in evidence
               for f in t.facts for a in own)


def rank_key(seed: str, *parts: str) -> int:
    """A stable pseudo-random order: the same seed and parts always give the same number."""
    digest = hashlib.blake2b("\x1f".join((seed, *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault: ``site`` names the operation it happens in (its kind and the turn or question),
    ``target`` the evidence turn it destroys, ``question`` the question it is aimed at."""

    error_type: str
    site: tuple[str, str]
    question: str
    target: str
    variant: str = ""
    text: str = ""  # what a lossy fault writes instead


@dataclass(frozen=True, slots=True)
class Entry:
    """One retrieved memory: its variable's full name (MemBase's ``trace_id``), text and turns."""

    trace_id: str
    formatted: str
    dias: frozenset[str]


@dataclass
class Outcome:
    """What a run did: questions passed, the operation each fault happened in, the clean run's facts."""

    passed: dict[str, bool] = field(default_factory=dict)
    predictions: dict[str, str] = field(default_factory=dict)
    fired: dict[Fault, str] = field(default_factory=dict)
    # where information lives, for planning faults: dia -> (op kind, site) of the operations that carried it
    stored: dict[str, set[str]] = field(default_factory=dict)
    sites: list[tuple[str, str]] = field(default_factory=list)


class Retriever:
    """IDF-weighted word overlap over the live memories: a deterministic stand-in for an embedder."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.docs = [word_set(t) for t in texts]
        self.n = len(self.docs)
        self.df: dict[str, int] = {}
        for doc in self.docs:
            for word in doc:
                self.df[word] = self.df.get(word, 0) + 1

    def rank(self, query: str) -> list[int]:
        """Indexes of the texts, best first (ties: the earlier text first)."""
        words = word_set(query)
        weight = {w: math.log(1 + self.n / self.df[w]) for w in words if w in self.df}
        scores = [math.fsum(weight[w] for w in doc & weight.keys()) for doc in self.docs]
        return sorted(range(self.n), key=lambda i: (-scores[i], i))


def construction_session(graph: Graph, conversation: Conversation, session: int,
                         opened: dict[int, str]) -> None:
    """Open MemBase's ``memory_construction`` session for LoCoMo session ``session`` (numbered in
    the order sessions open; ``opened`` maps LoCoMo session -> the graph's session id)."""
    opened[session] = graph.session(
        "memory_construction", f"It is the {len(opened) + 1}th conversational session.",
        session_id=f"locomo-{conversation.sample}-session-{session}")


def search_session(graph: Graph, top_k: int) -> None:
    graph.where("membase/runners/search.py")
    graph.advance(3600)
    graph.session("memory_search", "Based on a list of questions, we search the memory for each question.",
                  metadata={"top_k": top_k, "strict": True})


def query_variable(graph: Graph, question: Question) -> Var:
    return graph.variable(repr(question.question), identity=question.qid, category="message & query",
                          class_name="query",
                          comment="A task query which requires the memory system to retrieve relevant "
                                  "memories.")


def evaluate(graph: Graph, conversation: Conversation, retrievals: dict[str, list[Entry]],
             faults: dict[tuple[str, str], Fault], outcome: Outcome) -> None:
    """MemBase's evaluation runner and LLM judge over the retrieved memories, with reader faults."""
    graph.where("membase/runners/evaluation.py")
    graph.advance(3600)
    graph.session("memory_evaluation", "Evaluate the memory layer by checking whether the question-answering "
                  "model can generate the correct answer based on the retrieved memories.",
                  metadata={"qa_model": "gpt-4.1-mini", "judge_model": "claude-opus-4-5"})
    template = graph.variable(repr(_QA_TEMPLATE), identity="question-answering-prompt", category="prompt")
    questions = [q for q in conversation.questions if q.qid in retrievals]
    answers = {q.qid: q.answer for q in questions}
    if not graph.recording:  # a counterfactual run: the outcome only
        for question in questions:
            held = frozenset().union(*(e.dias for e in retrievals[question.qid]))
            fault = faults.get(("respond", question.qid))
            prediction = question.answer if set(question.evidence) <= held else UNKNOWN
            if fault is not None:
                prediction = _misread(question, answers, fault.variant)
                outcome.fired[fault] = ""
            outcome.predictions[question.qid] = prediction
            outcome.passed[question.qid] = prediction == question.answer
        return
    for question in questions:
        entries = retrievals[question.qid]
        held = frozenset().union(*(e.dias for e in entries)) if entries else frozenset()
        prediction = question.answer if set(question.evidence) <= held else UNKNOWN
        fault = faults.get(("respond", question.qid))
        op_id = graph.scope("question-answering", "evaluation",
                            "The question-answering model generates an answer based on the question, the "
                            "context retrieved from the memory system, and a question-answering prompt.")
        if fault is not None:
            prediction = _misread(question, answers, fault.variant)
            outcome.fired[fault] = op_id
        memories = [m for m in (graph.latest(e.trace_id) for e in entries) if m is not None]
        context = graph.variable(repr("\n\n".join(e.formatted for e in entries)),
                                 identity=content_identity("\n\n".join(e.formatted for e in entries)),
                                 category="memory_context", class_name="context",
                                 comment="The formatted memory context.")
        graph.op(memories, [context], comment="The formatted context is constructed from the retrieved "
                 "memories.")
        query = query_variable(graph, question)
        answer = graph.variable(repr(prediction), identity=content_identity(prediction),
                                category="llm_response", class_name="prediction",
                                comment="The model's response to the question.")
        graph.op([query, context, template], [answer], comment="The question-answering model generates an "
                 "answer based on the question, the context and a question-answering prompt.")
        graph.end_scope()
        outcome.predictions[question.qid] = prediction
        outcome.passed[question.qid] = prediction == question.answer
    graph.where("membase/evaluation/llm_judge.py")
    judge = graph.variable(repr(_JUDGE_TEMPLATE), identity="locomo-llm-judge", category="prompt",
                           class_name="judge_prompt")
    for question in questions:
        passed = outcome.passed[question.qid]
        graph.scope("llm-judge", "evaluation", "The judge model judges whether the model's prediction is "
                    "correct or not based on a list of golden answers.")
        query = query_variable(graph, question)
        golden = graph.variable(question.answer, identity=content_identity([question.answer]),
                                category="golden_answers", class_name="golden_answers",
                                comment="The golden answers for the question.")
        prediction = outcome.predictions[question.qid]
        answer = graph.variable(repr(prediction), identity=content_identity(prediction),
                                category="llm_response", class_name="prediction")
        verdict = ("The generated answer matches the gold answer. CORRECT" if passed
                   else "The generated answer does not give the gold answer. WRONG")
        response = graph.variable(repr(verdict), identity=content_identity(verdict), category="llm_response",
                                  class_name="judge_response", comment="The judge model's judgment.")
        graph.op([query, golden, judge, answer], [response],
                 comment="The judge model gives its judgment based on the question, the golden answers, "
                         "and the instruction.")
        score = 1.0 if passed else 0.0
        judged = graph.variable(repr(score), identity=content_identity(score), category="variable",
                                class_name="judge_score", comment="The judgement score.")
        graph.link(response, judged,
                   comment="Use a function to convert the judge model's response to a float score.")
        graph.end_scope()


def _misread(question: Question, answers: dict[str, str], variant: str) -> str:
    """A reader's mistake on a context that holds the answer: another question's answer, or a refusal."""
    if variant == "refuse":
        return UNKNOWN
    gold = question.answer
    others = sorted((a for qid, a in answers.items()
                     if qid != question.qid and not carries(a, gold) and not carries(gold, a)),
                    key=lambda a: rank_key(question.qid, a))
    return others[0] if others else UNKNOWN
