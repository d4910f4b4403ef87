"""Did the statement an extractor wrote from the evidence survive until the question?

The lineage engine blames an extraction when no memory unit it can see carries
the answer's information. Carrying is judged by words, and an extractor's
third-person paraphrase can hold the fact in words the test does not accept
(an abstractive gold, a date the message said as "yesterday"). What the
extractor wrote from the evidence is a plainer thing to follow: its statement
about the fact is stored as a unit (or merged into one), and a later write may
rewrite that unit without it (an update that overwrote a merely similar memory,
a lossy merge) or delete it. When every copy of the statement was removed
before the question was asked, the extraction is not the decisive fault: a
repaired extraction's statement would have met the same later write. The
remover is (:func:`statement_loss`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from memtrace_otel.attribution.carrying import Carrying, LineageCase
from memtrace_otel.attribution.presence import Information

__all__ = ["statement_loss"]

_KEPT_SHARE = 0.8
"""Share (IDF-weighted) of a statement's words a unit must still hold to still state it: a merge joins
whole sentences, a lossy merge or an overwrite keeps half at most."""
_MIN_WORDS = 3
_ABOUT_GOLD_SHARE = 0.5
_ABOUT_QUESTION_SHARE = 0.5
"""A statement of fewer content words (a bare date, a name) is not followed: too many units hold it."""


def statement_loss(case: LineageCase, carries: Carrying, op: str, *, asked: frozenset[str] = frozenset()
                   ) -> tuple[str, str, str] | None:
    """``(remover, before, after)`` when what ``op`` wrote about the evidence's fact reached memory and a
    later write removed every copy before the question; ``None`` when it never reached memory, or a
    copy survives.

    The statement followed is the one of ``op``'s written, non-memory outputs (its extracted
    facts) most about the fact (:func:`_aboutness`), keeping the answer's exact tokens (a
    statement with a number changed or another speaker's name is the extraction's own fault); a
    unit holds it when it keeps most of its words and every word of the gold it held.
    ``remover`` wrote the version ``after`` (a rewrite without the statement, a tombstone or a
    deletion marker) of the unit whose version ``before`` held it; of several copies, the one
    removed last is the loss.
    """
    index = case.index
    info = carries.info
    question = {t: index.idf(t) for t in asked}
    scored = [(_aboutness(info, question, tokens), position, tokens)
              for position, tokens in enumerate(tokens for v in index.written(op) if not index.is_stored(v)
                                                for _, tokens in index.pieces(v))
              if len(tokens) >= _MIN_WORDS]
    about = [item for item in scored if item[0] > 0]
    if not about:
        return None
    _, _, statement = max(about, key=lambda item: (item[0], -item[1]))
    if not info.exact <= statement:
        return None
    after_op, before_question = index.order(op), case.query_time
    kept = sorted(
        (v for v in carries.descendants
         if index.is_stored(v) and after_op < index.produced_at(v) < before_question
         and not index.data(v).get("deleted") and _keeps(index.tokens(v), statement, info.gold.keys(), index.idf)),
        key=lambda v: (index.produced_at(v), v))
    if not kept:
        return None
    losses = []
    for name in dict.fromkeys(index.data(v)["name"] for v in kept):
        removed = _removal(case, name, set(kept))
        if removed is None:
            return None  # a copy of what the extractor wrote is still in memory when the question is asked
        losses.append(removed)
    return max(losses, key=lambda item: (index.order(item[0]), item[0]))


def _share(weights: dict[str, float], tokens: frozenset[str]) -> float:
    total = math.fsum(weights.values())
    return math.fsum(w for t, w in weights.items() if t in tokens) / total if total else 0.0


def _aboutness(info: Information, asked: dict[str, float], tokens: frozenset[str]) -> float:
    """How much a statement is about the fact: its shares of the gold, of the sentence stating it and
    of the question's words (IDF-weighted: what a reader finds the fact by), summed; 0 when none
    reaches its bar (half the gold or the question, :meth:`.Information.related` for the sentence)."""
    gold, sentence, question = _share(info.gold, tokens), _share(info.sentence, tokens), _share(asked, tokens)
    if gold >= _ABOUT_GOLD_SHARE or info.related(tokens) or question >= _ABOUT_QUESTION_SHARE:
        return gold + sentence + question
    return 0.0


def _keeps(tokens: frozenset[str], statement: frozenset[str], gold: Iterable[str],
           idf: Callable[[str], float]) -> bool:
    if not (statement & frozenset(gold)) <= tokens:
        return False
    total = math.fsum(idf(t) for t in statement)
    return bool(total) and math.fsum(idf(t) for t in statement & tokens) / total >= _KEPT_SHARE


def _removal(case: LineageCase, name: str, holding: set[str]) -> tuple[str, str, str] | None:
    """The write that removed the statement from unit ``name`` (last held in a version of ``holding``)
    before the question, or ``None`` if the version current at the question still holds it."""
    index = case.index
    versions = [v for v in index.versions(name) if index.produced_at(v) < case.query_time]
    last = max(i for i, v in enumerate(versions) if v in holding)
    before = versions[last]
    if last + 1 < len(versions):
        after = versions[last + 1]
        producer = index.producer(after)
        return (producer, before, after) if producer is not None else None
    written = index.produced_at(before)
    for order, op, marker in index.marker_deletes(name):
        if written < order < case.query_time:
            return op, before, marker
    return None
