"""Finding the evidence of a failed answer, and the path from it to the blamed operation.

The evaluation names its evidence (ids such as LoCoMo's ``D1:3``, matched to
message variables by :func:`~memtrace_otel.graph.query.evidence_variables`).
When it names none, the graph's messages are ranked against the question plus
the gold answer (:mod:`.ranking`), and the first ranked are reordered by how
well each can be the question's evidence (:func:`question_fit`) and, when a
gold answer (a user's correction) exists, how much of it each says
(:func:`correction_fit`): a message that merely repeats the gold's words does
not answer the question. With no gold (a judge's verdict, a thumbs-down), the
sentence the failed answer came from is not taken for the fact
(:func:`without_prediction`).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterable

import networkx as nx

from memtrace_otel.attribution.base import FailureCase
from memtrace_otel.attribution.graph_index import GraphIndex, graph_index
from memtrace_otel.attribution.presence import critical_information, split_header, tokenize
from memtrace_otel.graph.query import evidence_variables
from memtrace_otel.semconv import VariableKind
from memtrace_otel.text import sentences

__all__ = [
    "answer_type_first",
    "correction_fit",
    "evidence_path",
    "find_evidence",
    "question_fit",
    "rerank_by_question",
    "without_prediction",
]

_RANKED_EVIDENCE = 3
_MEMORY_SEARCH_KEYS = 4
_MEMORY_SAYS = 0.5  # a memory says the correction when it holds half of it (weighted), as a runner-up must
_RERANK_DEPTH = 40
# Weights of question_fit's cues. Coverage (the question's words the message's own body says) is
# the main one; the others separate messages that cover the question alike.
_COVERAGE = 0.5
_SPEAKER = 0.3
_ANSWER_TYPE = 0.35
_RANK = 0.1
_PREDICTION = 0.1
# The correction weighs as much as the question's coverage; a runner-up within _CLOSE is as good a bet.
_CORRECTION = 0.5
_CLOSE = 0.1
_HEADER_SHARE = 0.5
_BRACKETS = re.compile(r"\[[^\]]*\]")
_ANSWER_TYPE_DEPTH = 5
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_ANSWER_TYPES = (
    (re.compile(r"\s*when\b", re.IGNORECASE),
     re.compile(rf"\b(yesterday|today|tomorrow|tonight|ago|last|next|week|weekend|month|year|since|recently"
                rf"|\d{{4}}|{_MONTHS}|{_DAYS})\b", re.IGNORECASE)),
    (re.compile(r"\s*how (many|much|long|old)\b", re.IGNORECASE),
     re.compile(r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten|dozen|few|several)\b",
                re.IGNORECASE)),
)


def find_evidence(G: nx.DiGraph, case: FailureCase, *, use_embeddings: bool = True,
                  stores: Iterable[str] | None = None) -> tuple[list[str], bool]:
    """Evidence message variables of ``case`` and whether they were given (not ranked).

    Parameters
    ----------
    use_embeddings:
        Rank with the offline embedding model as well as BM25 (when installed).
    stores:
        Rank only the messages of these memory stores (the ones the failed
        answer read; see :meth:`.GraphIndex.message_ranker`); all when ``None``.

    Returns
    -------
    tuple
        The message variable ids (sorted when given, best first when ranked),
        and ``True`` when the evaluation named them.
    """
    given = sorted(evidence_variables(G, case.evidence, at=case.evaluation))
    # Other variables may be named after the turn too (facts:D1:3); the message is the evidence.
    messages = [v for v in given if G.nodes[v].get("kind") == VariableKind.MESSAGE]
    if messages or given:
        return messages or given, True
    query = " ".join(filter(None, (case.question, case.gold)))
    if not query:
        return [], False
    index = graph_index(G)
    ranked = index.message_ranker(use_embeddings=use_embeddings, stores=stores).rank(query)
    if not ranked:
        return [], False
    fits = _fits(ranked[:_RERANK_DEPTH], case.question, case.prediction, case.gold,
                 lambda m: index.text(m, resolve=False))
    if case.gold:
        _said_by_memory(index, case, fits, stores)
    best, *others = sorted(fits, key=lambda m: -fits[m])
    if not case.gold:
        return [best], False
    # A correction may need several messages; a runner-up joins only when it fits almost as well and
    # holds the correction itself: each extra message is one more operation the walk may blame.
    info = critical_information(case.gold, case.question)
    close = [m for m in others[:_RANKED_EVIDENCE - 1]
             if fits[m] >= fits[best] - _CLOSE and info.carried_by(index.tokens(m), threshold=0.5)]
    return [best, *close], False


def _said_by_memory(index: GraphIndex, case: FailureCase, fits: dict[str, float],
                    stores: Iterable[str] | None) -> None:
    """Credit each message with the correction its memories say, when they say more of it than it does.

    Extractors rewrite a turn into third-person facts, and a correction is
    often worded like them rather than like the turn ("a safe place for people
    to grow" against "I want to build a safe place ..."): when no ranked message
    says the correction in its own words, a message says it if a memory written
    from it does (an extractor may also pull a fact from the turns around, so
    a message's own words come first). Memories holding the
    correction's words are found through the memory index; each one's origin
    messages (:meth:`.GraphIndex.origin_messages`) take its :func:`correction_fit`
    where it is higher than their own, and join the candidates if the ranking
    left them out.
    """
    gold, question = case.gold or "", case.question
    weights = critical_information(gold, question).gold
    if not weights or any(correction_fit(gold, question, index.text(m, resolve=False)) >= _MEMORY_SAYS
                          for m in fits):
        return  # a message says it in its own words: that is the evidence, whatever was extracted
    keys = sorted(weights, key=lambda t: (-weights[t], t))[:_MEMORY_SEARCH_KEYS]
    said: dict[str, float] = {}
    for unit in sorted(index.candidates(keys, stores=stores)):
        if index.data(unit).get("kind") != VariableKind.MEMORY_UNIT:
            continue
        fit = correction_fit(gold, question, index.text(unit, resolve=False))
        if fit < _MEMORY_SAYS:
            continue
        for message in index.origin_messages(unit):
            said[message] = max(said.get(message, 0.0), fit)
    for message in sorted(said, key=lambda m: (-said[m], m))[:_RERANK_DEPTH]:
        text = index.text(message, resolve=False)
        own = correction_fit(gold, question, text)
        if message not in fits:
            fits[message] = question_fit(question, case.prediction, text, _RERANK_DEPTH) + _CORRECTION * own
        if said[message] > own:
            fits[message] += _CORRECTION * (said[message] - own)


def rerank_by_question(ranked: list[str], question: str | None, prediction: str | None,
                       content: Callable[[str], str | None], *, gold: str | None = None,
                       depth: int = _RERANK_DEPTH) -> list[str]:
    """The first ``depth`` of ``ranked`` reordered by :func:`question_fit`, then the rest.

    With a ``gold`` answer (a user's correction), each message's
    :func:`correction_fit` is added: the evidence answers the question *and*
    says the correction, where a message that only repeats the correction's
    words (a reply, a later mention) does not fit the question.

    Without a gold answer the search can only use the question, and the
    retrieval-style ranking (BM25 and embeddings) favours short messages that
    share a name or a date with it; a message whose own words cover the
    question is a better bet, deep as it may rank.

    >>> texts = {"a": "[1 May] Bob: Ann, bye!", "b": "[1 May] Ann: I adopted a dog named Max"}
    >>> rerank_by_question(["a", "b"], "What pet did Ann adopt?", None, texts.get)
    ['b', 'a']
    """
    scores = _fits(ranked[:depth], question, prediction, gold, content)
    return sorted(scores, key=lambda m: -scores[m]) + ranked[depth:]


def _fits(top: list[str], question: str | None, prediction: str | None, gold: str | None,
          content: Callable[[str], str | None]) -> dict[str, float]:
    """:func:`question_fit` of each of ``top`` (in rank order), plus :func:`correction_fit` with a gold."""
    scores = {m: question_fit(question, prediction, content(m), rank) for rank, m in enumerate(top)}
    if gold:
        for m in top:
            scores[m] += _CORRECTION * correction_fit(gold, question, content(m))
    return scores


def correction_fit(gold: str | None, question: str | None, text: str | None) -> float:
    """Weighted share of ``gold``'s words (those not in the question) that message ``text`` says.

    Words of the body count whole, those of the header (timestamp, speaker)
    half: every message of a session shares its date, so a header can only
    say that the answer's date is near, not that this message states it.

    >>> correction_fit("a dog named Max", "What pet did Ann adopt?", "[1 May] Ann: I named my dog Max")
    1.0
    >>> correction_fit("7 May 2023", "When did Ann go?", "[7 May 2023] Ann: I went to the beach")
    0.5
    """
    weights = critical_information(gold, question).gold
    total = math.fsum(weights.values())
    if not total:
        return 0.0
    header, body = split_header(text or "")
    said, heading = tokenize(body), tokenize(header)
    return math.fsum(w * (1.0 if t in said else _HEADER_SHARE if t in heading else 0.0)
                     for t, w in weights.items()) / total


def question_fit(question: str | None, prediction: str | None, text: str | None, rank: int = 0) -> float:
    """How well message ``text`` can be the evidence of ``question`` when no gold answer says what it is.

    Cues, each general to question answering over a conversation:

    * coverage: the share of the question's words (names and dates of the
      message's header aside, which many messages share) its body says;
    * the speaker: a question about a person is mostly answered by what that
      person said;
    * the answer type: a "when" question needs a time in the body, a "how
      many" one a number (:func:`answer_type_first`);
    * the failed prediction: the answer was wrong, so a message that states
      it is where the wrong answer came from, not the evidence of the right one;
    * the search's own rank (``rank``, 0 best), a little.

    >>> q = "What pet did Ann adopt?"
    >>> question_fit(q, None, "[1 May] Ann: I adopted a dog") > question_fit(q, None, "[1 May] Bob: a dog?")
    True
    """
    header, body = split_header(text or "")
    asked, said = tokenize(question), tokenize(body)
    speaker = tokenize(_BRACKETS.sub("", header).strip().rstrip(":"))
    topic = asked - speaker - tokenize(header)
    score = _COVERAGE * (len(topic & said) / len(topic) if topic else 0.0) + _RANK / (1 + rank)
    if speaker and speaker & asked:
        score += _SPEAKER
    wanted = _answer_type(question)
    if wanted is not None and wanted.search(body):
        score += _ANSWER_TYPE
    predicted = tokenize(prediction) - asked
    if predicted:
        score -= _PREDICTION * len(predicted & said) / len(predicted)
    return score


def without_prediction(text: str, question: str | None, prediction: str | None) -> str:
    """``text`` without the sentences that state the whole failed prediction.

    Without a gold answer, the fact a message holds is found by the
    question's words; but the failed answer was drawn from a sentence too, and
    when a sentence of the evidence says every word of it, that sentence gave
    a failed answer: the fact is in another one. A sentence that says only part
    of the prediction may hold the fact as well, and stays; so does the whole
    text when no other sentence shares a word with the question.

    >>> without_prediction("[1 May] Ann: I love tennis. I went to Rome for the tennis.",
    ...                    "Where did Ann go for tennis?", "love tennis")
    '[1 May] Ann: I went to Rome for the tennis.'
    >>> without_prediction("[1 May] Ann: I love tennis. I went to Rome for the tennis.",
    ...                    "Where did Ann go for tennis?", "love tennis shows")
    '[1 May] Ann: I love tennis. I went to Rome for the tennis.'
    """
    asked = tokenize(question)
    predicted = tokenize(prediction) - asked
    if not predicted:
        return text
    lines, changed = [], False
    for line in text.splitlines():
        header, body = split_header(line)
        pieces = sentences(body)
        kept = [p for p in pieces if not predicted <= tokenize(p)]
        if len(kept) < len(pieces) and any(tokenize(p) & asked for p in kept):
            line, changed = header + " ".join(kept), True
        lines.append(line)
    return "\n".join(lines) if changed else text


def _answer_type(question: str | None) -> re.Pattern[str] | None:
    return next((pattern for cue, pattern in _ANSWER_TYPES if cue.match(question or "")), None)


def answer_type_first(ranked: list[str], question: str | None, content: Callable[[str], str | None], *,
                      depth: int = _ANSWER_TYPE_DEPTH) -> list[str]:
    """``ranked`` with those of its first ``depth`` that can answer the question's type moved first.

    Without a gold answer, the question's form still says what the answer is: a
    "when" question needs a time expression in the message's own words (its
    timestamp header does not count: every message has one), a "how many" one a
    number. A message that cannot state such an answer is not its evidence.

    >>> texts = {"a": "[1 May] Ann: I love the beach", "b": "[1 May] Ann: I went to the beach last week"}
    >>> answer_type_first(["a", "b"], "When did Ann go to the beach?", texts.get)
    ['b', 'a']
    """
    wanted = _answer_type(question)
    if wanted is None:
        return ranked
    top = ranked[:depth]
    fitting = [m for m in top if wanted.search(split_header(content(m) or "")[1])]
    return fitting + [m for m in ranked if m not in fitting]


def evidence_path(
    G: nx.DiGraph, evidence: list[str], carrier: str | None, operation: str, failure: FailureCase
) -> list[str]:
    """Variables and operations from the evidence through the blamed op to the failed verdict."""
    path: list[str] = []
    start = evidence[0] if evidence else None
    waypoint = carrier if carrier in G else None
    for source, target in ((start, waypoint), (waypoint or start, operation)):
        if source is None or target is None:
            continue
        try:
            segment = nx.shortest_path(G, source, target)
        except nx.NetworkXNoPath:
            segment = [source, target]
        path.extend(n for n in segment if not path or n != path[-1])
    if not path or path[-1] != operation:
        path.append(operation)
    if failure.answer in G:
        with contextlib.suppress(nx.NetworkXNoPath):
            path.extend(nx.shortest_path(G, operation, failure.answer)[1:])
    path.append(failure.evaluation)
    return list(dict.fromkeys(path))
