"""Answers to time questions: what a sentence's "yesterday" or "last week" means, and what time a
question asks about.

Used by the offline reader (:mod:`memtrace_bench.systems.reader`). The expressions themselves
(which ones, how each resolves) are :mod:`memtrace_bench.systems.time_expressions`; here the
one nearest the question's words is chosen and shaped as the question asks (a year, a month, a
distance back, or as said).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence

from memtrace_bench.systems.interfaces import Sentence
from memtrace_bench.systems.time_expressions import (
    MONTH_NAMES,
    RULES,
    Context,
    Found,
    TimeSpan,
    durations,
    format_day,
    matches,
    parse_day,
    scan,
)
from memtrace_otel.text import content_tokens, stem

__all__ = [
    "TimeSpan",
    "answer_duration",
    "answer_when",
    "answer_when_in",
    "is_duration",
    "is_temporal",
    "parse_day",
    "question_span",
    "sentence_span",
]

# -- questions and answers -----------------------------------------------------------------------

_TEMPORAL = re.compile(
    r"^\W*(?:(?:so|and|but|ok|okay),?\s+)?(?:around\s+)?(?:when\b|since\s+when\b|how\s+long\s+ago\b"
    r"|how\s+many\s+(?:days|weeks|months|years)\s+ago\b|(?:in\s+|on\s+)?(?:what|which)\s+(?:year|month|date"
    r"|day|week|weekend|season)\b)", re.I)
_DURATION = re.compile(
    r"^\W*(?:(?:for|after|in)\s+)?how\s+(?:long\b(?!\s+ago)|many\s+(?:days|weeks|months|years)\b"
    r"(?!\s+(?:a|per|each|every)\b)(?!.*\bago\b))", re.I)
_ASKS_YEAR = re.compile(r"\b(?:what|which)\s+year\b", re.I)
_ASKS_MONTH = re.compile(r"\b(?:what|which)\s+month\b", re.I)
_ASKS_AGO = re.compile(r"\bhow\s+(?:long|many\s+\w+)\s+ago\b", re.I)
_WORD = re.compile(r"[A-Za-z0-9']+")
_QUESTION_WORDS = frozenset({"when", "long", "ago", "year", "month", "date", "day", "week", "many"})


def is_temporal(question: str) -> bool:
    """Whether ``question`` asks for a time (its answer is a date or a period).

    >>> [is_temporal(q) for q in ["When did Mel run?", "In which year did Jo move?", "How long ago was it?",
    ...                           "How long has Nate had turtles?", "What did Jo paint in May?"]]
    [True, True, True, False, False]
    """
    return _TEMPORAL.search(question or "") is not None


def is_duration(question: str) -> bool:
    """Whether ``question`` asks how long something lasted ("three years": :func:`answer_duration`).

    >>> [is_duration(q) for q in ["How long has Nate had his turtles?", "How long ago did Jo move?",
    ...                           "How many years has Mel painted?", "How many days a week does Jo run?"]]
    [True, False, True, False]
    """
    return _DURATION.search(question or "") is not None


def _said(sentence: Sentence) -> dt.date | None:
    return parse_day(sentence.date) if isinstance(sentence.date, str) else None


def _nearest(found: Sequence[Found], question: str, text: str) -> Found:
    """The expression nearest the question's words in the sentence (weak cues count as farther)."""
    wanted = set(content_tokens(question)) - _QUESTION_WORDS
    places = [(m.start(), m.end()) for m in _WORD.finditer(text)
              if stem(m.group(0).lower().strip("'")) in wanted]

    def distance(item: Found) -> int:
        gaps = (max(0, start - item.end, item.start - end) for start, end in places)
        return min(gaps, default=0) + item.weak

    return min(found, key=lambda item: (distance(item), item.start))


def _shape(question: str, found: Found | None, said: dt.date) -> str:
    """The answer as the question asks for it: a year, a month, a distance back, or as said."""
    lo, hi = found.span if found else (said, said)
    middle = lo + (hi - lo) // 2
    if _ASKS_AGO.search(question) and found and (found.ago or (hi - lo).days > 300):
        return found.ago or f"{said.year - middle.year} years ago"
    if _ASKS_YEAR.search(question):
        return str(middle.year)
    if _ASKS_MONTH.search(question) and (hi - lo).days < 62:
        return f"{MONTH_NAMES[middle.month - 1]} {middle.year}"
    return found.phrase if found else format_day(said)


def answer_when(question: str, sentence: Sentence) -> str:
    """The time ``sentence`` says its event happened, phrased as an answer to ``question``.

    The expression nearest the question's words wins; without one it is the day the sentence was
    said; a date that does not parse is returned as it is.

    >>> s = Sentence("D1:3", "Caroline", "8 May 2023", "I went to a support group yesterday.")
    >>> answer_when("When did Caroline go to the support group?", s)
    '7 May 2023'
    >>> answer_when("Which year?", Sentence("D2:1", "Jon", "8 May 2023", "We moved last summer."))
    '2022'
    >>> answer_when("When?", Sentence("D1:1", "Jo", "someday", "Last week."))
    'someday'
    """
    said = _said(sentence)
    if said is None:
        return sentence.date
    found = scan(sentence.text or "", said)
    return _shape(question or "", _nearest(found, question or "", sentence.text) if found else None, said)


def answer_when_in(question: str, sentence: Sentence, message: Sequence[Sentence]) -> str:
    """:func:`answer_when`, but when ``sentence`` names no time, the nearest sentence of the same
    message (``message``'s sentences with its ``dia_id``; earlier first on ties) that does.

    >>> said = [Sentence("D3:1", "Jo", "8 May 2023", t) for t in ("Last Friday was wild.", "I won a race.")]
    >>> answer_when_in("When did Jo win a race?", said[1], said)
    'the Friday before 8 May 2023'
    """
    if sentence_span(sentence) is None:
        same = [s for s in message if s.dia_id == sentence.dia_id and s.date == sentence.date]
        here = next((i for i, s in enumerate(same) if s == sentence), 0)
        timed = [(abs(i - here), i) for i, s in enumerate(same) if sentence_span(s) is not None]
        if timed:
            return answer_when(question, same[min(timed)[1]])
    return answer_when(question, sentence)


def answer_duration(question: str, sentence: Sentence) -> str:
    """How long ``sentence`` says something has lasted ("for 3 years", "seven years now",
    "since 2016"), nearest the question's words; else :func:`answer_when`'s answer.

    >>> s = Sentence("D5:2", "Nate", "23 January 2022", "I've had them for 3 years now!")
    >>> answer_duration("How long has Nate had his turtles?", s)
    '3 years'
    >>> answer_duration("How long has Mel painted?", Sentence("D9:1", "Mel", "8 May 2023", "Since 2016!"))
    'since 2016 (7 years)'
    """
    said, text = _said(sentence), sentence.text or ""
    if said is None:
        return answer_when(question, sentence)
    found = durations(text, said)
    return _nearest(found, question or "", text).phrase if found else answer_when(question, sentence)


def sentence_span(sentence: Sentence) -> TimeSpan | None:
    """The days ``sentence``'s event happened in (its first clear time expression resolved), or
    ``None`` when it names no time (the caller decides whether the day it was said will do).

    >>> sentence_span(Sentence("D1:3", "Mel", "8 May 2023", "We went camping last month."))
    (datetime.date(2023, 4, 1), datetime.date(2023, 4, 30))
    >>> sentence_span(Sentence("D1:4", "Mel", "8 May 2023", "Camping is fun.")) is None
    True
    """
    said = _said(sentence)
    found = scan(sentence.text or "", said) if said else ()
    return min(found, key=lambda item: (item.weak, item.start)).span if found else None


_NO_ANCHOR = Context(dt.date(2000, 1, 1), 0)  # questions are resolved only where they name a year
_ABSOLUTE = tuple(rule for rule in RULES if rule.absolute)


def question_span(question: str) -> TimeSpan | None:
    """The days a question restricts itself to ("on 9 October, 2022", "in January 2023", "in 2021"),
    or ``None``. A question has no day it was said, so only times that name their year count:
    "in the second week of November" or "last summer" give ``None``; several give their hull.

    >>> question_span("What did Jo watch on 1 May, 2022?")
    (datetime.date(2022, 5, 1), datetime.date(2022, 5, 1))
    >>> question_span("Where did Jo travel in July 2022?")
    (datetime.date(2022, 7, 1), datetime.date(2022, 7, 31))
    >>> question_span("What did Jo do last summer?") is None
    True
    """
    spans = []
    for m, rule in matches(question or "", _ABSOLUTE):
        answer = rule.handler(m, _NO_ANCHOR) if m.groupdict().get("y") else None
        spans += [answer[1]] if answer else []
    return (min(lo for lo, _ in spans), max(hi for _, hi in spans)) if spans else None
