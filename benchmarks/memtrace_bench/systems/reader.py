"""The offline reader: picks the context sentence that answers a question and reads a short answer off it.

Deterministic rules a reader of English chat would use, no model (a few milliseconds a call).
Each context sentence scores the IDF-weighted overlap of its stemmed content words with the
question's (IDF over the given context, so a word every message shares counts for little;
irregular verbs and chat spellings are read as their plain word). The question's words said
in the sentences around it in the same message count at a discount, and so do those of a
question the other speaker asked just before (a reply answers it); those of the two messages
before its own count at a further discount (a message continues the thread it answers in: "I
took a pottery class." - "How was it?" - "So relaxing."). The person the question is
about (the first speaker it names) raises that speaker's sentences; a sentence that is itself
a question, or says nothing the question does not ("Thanks, Mel!"), ranks low; one holding
the kind of thing asked (a number for "how many", a name for "who" or for "what game/book/city",
a time :mod:`~memtrace_bench.systems.temporal` can date for "when") ranks higher; one said
outside the days the question names ("in May 2023") ranks lower. The best sentence's answer is
read off it by :mod:`~memtrace_bench.systems.answer_phrase`.

wordllama sentence similarity was tried as a further ranking term and left out: on LoCoMo it
moved the right sentence down as often as up. So did (on dev and held-out conversations alike)
requiring the question's rarest word, rewarding its words said close together, weighting the
verb it asks about, and counting the message after a sentence as part of its thread.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Sequence

from memtrace_bench.systems import temporal
from memtrace_bench.systems.answer_phrase import (
    Doc,
    Question,
    analysed,
    list_answer,
    parse_question,
    phrase,
    titled,
    word_key,
)
from memtrace_bench.systems.interfaces import AnswerResult, ContextItem, Sentence
from memtrace_otel.text import bm25_idf

__all__ = ["ExtractiveAnswerer"]

_MAX_CANDIDATES = 25
# Ranking weights (multiples of the question's mean IDF where additive).
# _TYPED: a sentence holding the kind of thing asked gains one mean IDF, whatever the kind (it was
# 0.5 but for times; 1.0 ranked better on dev and held-out conversations alike).
_NEAR, _ASKED, _TYPED, _INFO = 0.5, 1.0, 1.0, 0.05
_SUBJECT, _OTHER, _ASKS, _STALE, _DATED, _UNDATED = 1.4, 0.8, 0.4, 0.3, 1.5, 0.5
_SLACK_DAYS = 3
_FEEL = word_key("feel")  # "How did she feel ...": asks for a mood
# The thread's words: 0.4 chosen on the dev conversations (0.6 was better held out, worse on dev).
_THREAD = 0.4


class ExtractiveAnswerer:
    """Reads the answer off the context sentence that best matches the question (see the module).

    >>> ctx = [ContextItem("u1", [Sentence("D1:1", "Ann", "8 May 2023", "I adopted a dog named Rex.")]),
    ...        ContextItem("u2", [Sentence("D1:2", "Bob", "9 May 2023", "I went hiking with my sister.")])]
    >>> ExtractiveAnswerer().answer("What is the name of Ann's dog?", ctx).text
    'Rex'
    """

    def answer(self, question: str, context: Sequence[ContextItem]) -> AnswerResult:
        ranked = self._ranked(question, context)
        if ranked is None:
            return AnswerResult("I don't know.")
        query, docs = ranked
        text = list_answer(query, docs) if query.kind == "list" else phrase(query, docs[0])
        return AnswerResult(text, docs[0].sentence, docs[0].unit)

    def candidates(self, question: str, context: Sequence[ContextItem]) -> list[AnswerResult]:
        """The best-matching context sentences (at most 25, one answer each), best first."""
        ranked = self._ranked(question, context)
        if ranked is None:
            return []
        query, docs = ranked
        first = list_answer(query, docs) if query.kind == "list" else phrase(query, docs[0])
        return [AnswerResult(first, docs[0].sentence, docs[0].unit),
                *(AnswerResult(phrase(query, d), d.sentence, d.unit) for d in docs[1:_MAX_CANDIDATES])]

    def _ranked(self, question: str, context: Sequence[ContextItem]) -> tuple[Question, list[Doc]] | None:
        docs = _docs(context)
        if not docs:
            return None
        query = parse_question(question, {d.sentence.speaker for d in docs})
        _score(query, docs)
        docs.sort(key=lambda d: (-d.score, d.order))
        return query, docs


# -- ranking -----------------------------------------------------------------------------------
def _docs(context: Sequence[ContextItem]) -> list[Doc]:
    docs: list[Doc] = []
    for item in context:
        for sentence in item.sentences:
            same = docs and docs[-1].sentence.dia_id == sentence.dia_id and docs[-1].unit == item.unit
            message = docs[-1].message if same else []
            message.append(sentence)
            doc = Doc(sentence, item.unit, len(docs), analysed(sentence.text),
                       sentence.text.rstrip().endswith("?"), message)
            if same:
                docs[-1].after = doc
            docs.append(doc)
    return docs


def _score(query: Question, docs: list[Doc]) -> None:
    idf = _idf(query, docs)
    own = [doc.text.keys & query.terms for doc in docs]
    lexical = _lexical(docs, own, idf, query)
    scale = math.fsum(idf.values()) / len(idf) if idf else 1.0
    for index, doc in enumerate(docs):
        fresh = query.fresh(doc.text)
        score = lexical.get(index, 0.0) + scale * (_TYPED * _typed(query, doc) + _INFO * min(fresh, 5))
        doc.score = max(score, 0.0) * _factor(query, doc, fresh)


def _lexical(docs: list[Doc], own: list[frozenset[str]], idf: dict[str, float],
             query: Question) -> dict[int, float]:
    """The overlap score of each sentence that has one: its own words, its neighbours', the question
    it replies to, and the two messages before its own (the thread it continues)."""
    said: dict[str, frozenset[str]] = {}
    for doc, found in zip(docs, own, strict=True):
        said[doc.sentence.dia_id] = said.get(doc.sentence.dia_id, frozenset()) | found
    touched = _touched(docs, own)
    scores = {}
    for index, doc in enumerate(docs):
        before = _previous(doc.sentence.dia_id)
        thread = said.get(before, frozenset()) | said.get(_previous(before), frozenset())
        if not thread and index not in touched:
            continue  # nothing of the question said in or around it: skip the costly part
        near = _near(docs, own, index) - own[index]
        asked = _asked(docs, index) & query.terms
        # fsum: these are sums over sets, whose order follows the process's string hashing; a plain
        # sum's last bit would then differ between processes and flip near-ties between sentences.
        score = (math.fsum(idf[t] for t in own[index]) + _NEAR * math.fsum(idf[t] for t in near)
                 + _ASKED * math.fsum(idf[t] for t in asked)
                 + _THREAD * math.fsum(idf[t] for t in thread - own[index] - near - asked))
        if score:
            scores[index] = score
    return scores


def _touched(docs: list[Doc], own: list[frozenset[str]]) -> set[int]:
    """The sentences near one that says a word of the question, or replying to a question that does."""
    touched: set[int] = set()
    for index, found in enumerate(own):
        if found:
            touched.update(range(max(0, index - 2), min(len(docs), index + 3)))
            if docs[index].asks:
                touched.update(range(index + 1, min(len(docs), index + 8)))
    return touched


def _idf(query: Question, docs: list[Doc]) -> dict[str, float]:
    return bm25_idf(query.terms, [doc.text.keys for doc in docs])


def _near(docs: list[Doc], own: list[frozenset[str]], index: int) -> frozenset[str]:
    """The question's words said within two sentences of ``docs[index]`` in the same message."""
    dia = docs[index].sentence.dia_id
    found: frozenset[str] = frozenset()
    for other in range(max(0, index - 2), min(len(docs), index + 3)):
        if other != index and docs[other].sentence.dia_id == dia:
            found |= own[other]
    return found


def _asked(docs: list[Doc], index: int) -> frozenset[str]:
    """The words of a question the other speaker asked just before this message (a reply answers it)."""
    doc = docs[index]
    start = index
    while start > 0 and docs[start - 1].sentence.dia_id == doc.sentence.dia_id:
        start -= 1
    if index - start > 2 or start == 0:
        return frozenset()
    before = docs[start - 1]
    if not before.asks or before.sentence.speaker == doc.sentence.speaker \
            or before.sentence.dia_id != _previous(doc.sentence.dia_id):
        return frozenset()
    return before.text.keys


def _previous(dia_id: str) -> str:
    """The id of the message before ``dia_id`` in its session.

    >>> _previous("D5:3")
    'D5:2'
    """
    head, _, index = dia_id.rpartition(":")
    return f"{head}:{int(index) - 1}" if index.isdigit() else ""


def _typed(query: Question, doc: Doc) -> bool:
    """Whether the sentence holds the kind of thing asked for (a number, a name, a time)."""
    if query.kind == "number":
        return doc.text.numbered
    if query.kind in ("name", "where", "who") or (query.kind in ("what", "list") and titled(query.head)):
        return bool(doc.text.caps - query.keys - query.names - query.nicks)
    if query.kind in ("when", "duration"):
        return _event_span(doc.sentence) is not None
    if query.kind == "manner" and _FEEL in query.terms:
        # "How did she feel ...": a sentence that says a mood ("so excited", "proud").
        return any(w.role == "filler" for w in doc.text.words)
    return False


@functools.lru_cache(maxsize=65536)
def _event_span(sentence: Sentence) -> temporal.TimeSpan | None:
    return temporal.sentence_span(sentence)


def _factor(query: Question, doc: Doc, fresh: int) -> float:
    factor = 1.0
    if query.subject is not None:
        factor *= _SUBJECT if doc.sentence.speaker == query.subject else _OTHER
    if doc.asks:
        factor *= _ASKS
    if not fresh:
        factor *= _STALE  # says nothing the question does not: cannot be the answer
    if query.span is not None:
        factor *= _DATED if _within(query.span, doc.sentence) else _UNDATED
    elif query.month is not None:
        factor *= _DATED if _in_month(query.month, doc.sentence) else _UNDATED
    return factor


def _in_month(month: int, sentence: Sentence) -> bool:
    """Whether the sentence's event happened (else, it was said) in ``month`` of any year: "in June"."""
    event = _event_span(sentence)
    if event is not None:
        first, last = event
        spanned = min(11, (last.year - first.year) * 12 + last.month - first.month)  # months after the first
        return (month - first.month) % 12 <= spanned
    said = temporal.parse_day(sentence.date)
    return said is not None and said.month == month


def _within(span: temporal.TimeSpan, sentence: Sentence) -> bool:
    """Whether the sentence was said, or its event happened, in (or a few days around) ``span``."""
    slack = dt.timedelta(days=_SLACK_DAYS)
    start, end = span[0] - slack, span[1] + slack
    said = temporal.parse_day(sentence.date)
    if said is not None and start <= said <= end:
        return True
    event = _event_span(sentence)
    return event is not None and event[0] <= end and start <= event[1]
