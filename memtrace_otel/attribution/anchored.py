"""A relative date kept by an episode that its own words date: the memory of a conversation.

Episodic memory systems (EverMemOS's memcells and episodes, a session
summary) write a conversation down as an episode that opens with its date
("On 8 May 2023, Caroline and Melanie had a conversation. Caroline attended
an LGBTQ support group recently ..."): the date is part of what the memory
says, and every event it tells is placed by it. A message that said "I went
yesterday" on 8 May meant 7 May: the gold a question asks ("7 May 2023") is
that relative time resolved against the message's day. An episode dated that
day, in its own words, that tells the same event holds what a reader needs to
date it; the extractor wrote the relative time against the date it kept.

Only a date the memory says in its words counts, never a record's timestamp
alone: a fact stored with only the time it was written (a mem0 record) and
without its date has lost it. The date must be the message's own day (the
anchor its relative time was said against), said by the episode apart from the
event (a statement dated by itself says when the event was), and the statement
must tell the event as the question asks for it (half the question's words its
sentence holds) and state no date.
"""

from __future__ import annotations

from memtrace_otel.attribution.graph_index import GraphIndex
from memtrace_otel.attribution.presence import (
    Information,
    split_header,
    tokenize,
    weighted_share,
    without_clock,
)
from memtrace_otel.attribution.ranking import Embedder
from memtrace_otel.text import MONTH_NAMES, sentences

__all__ = ["anchor_day", "dated_episode", "header_day", "months_and_years"]

_DAY_TOKENS = 3  # day, month, year: a date a memory can be placed by
_EPISODE_SIMILARITY = 0.55  # as :data:`.carrying._PARAPHRASE_SIMILARITY`: the same event in other words
_TOPIC_WORDS = 1  # the question must find the event by one of its words at least
_TOPIC_SHARE = 0.5  # as :data:`.presence._TOPIC_SHARE`: half the question's (IDF-weighted) words


def _date_tokens(tokens: frozenset[str]) -> frozenset[str]:
    """Tokens of ``tokens`` that place something in time: month names, years, day numbers."""
    return frozenset(t for t in tokens if t in MONTH_NAMES or (t.isdigit() and len(t) in (1, 2, 4)))


def months_and_years(tokens: frozenset[str] | dict[str, float]) -> frozenset[str]:
    """Month names and years of ``tokens``: what dates a statement by itself (a count is no date)."""
    return frozenset(t for t in tokens if t in MONTH_NAMES or (t.isdigit() and len(t) == 4))


def _body_tokens(text: str) -> frozenset[str]:
    """Tokens of what ``text``'s lines say, their headers (the day they were said on) left out."""
    return frozenset().union(*(tokenize(split_header(line)[1]) for line in text.splitlines()))


def header_day(text: str) -> frozenset[str]:
    """The day, month and year the header of ``text``'s first line names, its time of day left out;
    empty when it names no whole day.

    >>> sorted(header_day("[1:56 pm on 8 May, 2023] Sam: I went for a check-up at 3:30."))
    ['2023', '8', 'may']
    >>> header_day("Sam: no header")
    frozenset()
    """
    if not text:
        return frozenset()
    day = _date_tokens(tokenize(split_header(without_clock(text.splitlines()[0]))[0]))
    return day if len(day) == _DAY_TOKENS and any(t in MONTH_NAMES for t in day) else frozenset()


def anchor_day(index: GraphIndex, evidence: str, info: Information) -> frozenset[str] | None:
    """The tokens of the day the evidence message was said on (its record's time, the header
    ``[8 May 2023]`` of its text), when the gold is a time the message said relative to that day:
    its words hold the gold only once relative times are resolved. ``None`` otherwise.
    """
    if not info.gold or not info.text:
        return None
    resolved, said = index.text(evidence), index.text(evidence, resolve=False)
    if not resolved or not said:
        return None
    gold = frozenset(info.gold)
    if not gold <= _body_tokens(resolved) or gold <= _body_tokens(said) or not _date_tokens(gold):
        return None
    return header_day(resolved) or None


def dated_episode(index: GraphIndex, variable: str, info: Information, day: frozenset[str],
                  semantic: Embedder | None) -> bool:
    """Whether ``variable`` dates itself ``day`` in its own words and tells the evidence's event.

    The date is read from the variable's text with relative times left as they are and
    headers (a record's timestamp) left out, in a statement of its own (the episode's opening):
    a statement that dates the event itself says when the event was, and the day the message
    was said is then the wrong one. The event is a statement, not quoted from a message and
    saying no date, that holds half the question's words the evidence sentence holds
    (IDF-weighted) and either much of that sentence's words or its meaning (embedding
    similarity).
    """
    if len(info.topic) < _TOPIC_WORDS:
        return False
    text = index.text(variable, resolve=False)
    if not text or not any(day <= tokenize(sentence) for line in text.splitlines()
                           for sentence in sentences(split_header(line)[1])):
        return False
    pieces = [piece for piece, tokens in index.pieces(variable)
              if weighted_share(info.topic, tokens, info.topic_total) >= _TOPIC_SHARE
              and not months_and_years(tokens) and not index.quoted_message(piece)]
    if not pieces:
        return False
    if any(info.related(tokenize(piece)) for piece in pieces):
        return True
    if semantic is None:
        return False
    vectors = semantic([info.text, *pieces])
    return bool(max((vectors[1:] @ vectors[0]).tolist()) >= _EPISODE_SIMILARITY)
