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
remover is (:func:`statement_loss`), unless the statement kept none of the
gold its message's sentence said (two words or more, or a name): a unit
that never held the answer lost nothing by its removal, and the extraction
that left the answer out decided. When a unit still held the statement
as the question was asked, the information was in memory
(:attr:`Fate.alive`): the search that did not return it is the one to look at.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain

from memtrace_otel.attribution.anchored import months_and_years
from memtrace_otel.attribution.carrying import Carrying, LineageCase
from memtrace_otel.attribution.graph_index import STORED_KINDS, GraphIndex
from memtrace_otel.attribution.presence import (
    Information,
    salient,
    split_header,
    split_lines,
    tokenize,
    weighted_share,
)
from memtrace_otel.semconv import Category, VariableKind
from memtrace_otel.text import MONTH_NAMES, spoken_day

__all__ = [
    "Fate",
    "held_already",
    "keeps",
    "removed_on_day",
    "said_beside",
    "statement_fate",
    "statement_loss",
    "stating_gold",
    "stored_instead",
    "unread_by",
    "untold_event",
    "wrote_about",
]

_KEPT_SHARE = 0.8
"""Share (IDF-weighted) of a statement's words a unit must still hold to still state it: a merge joins
whole sentences, a lossy merge or an overwrite keeps half at most."""
_MIN_WORDS = 3
"""A statement of fewer content words (a bare date, a name) is not followed: too many units hold it."""
# A statement is about the fact when it holds half the gold or half the question's (IDF-weighted) words,
# or is related to the sentence stating it (:meth:`.Information.related`; 0.3 of its own words, header
# aside, to tell whether an extraction wrote about the fact at all).
_ABOUT_GOLD_SHARE = 0.5
_ABOUT_QUESTION_SHARE = 0.5
_ABOUT_SENTENCE_SHARE = 0.3
_WORD_WEIGHT = 1.0  # a plain gold word's weight in :class:`.Information`; names and numbers weigh more
_HELD_SHARE = 0.5
"""Share (IDF-weighted) of the sentence stating the fact, and of the gold's words it says, a memory an
extraction read must hold to hold the fact already: a paraphrase keeps half of either, a memory merely on
the same topic (the same day's date, the speaker's hobby) keeps a third at most."""
_NONE_KEPT_WORDS = 2
"""Gold words (of the evidence sentence) a statement must keep none of to have lost the answer, when none
of them is a name, number or month: a lone plain word may be said by a synonym."""
_READ_SIDE = frozenset({Category.RETRIEVAL, Category.RERANK, Category.GENERATION})
_STATES_GOLD_SHARE = 0.8
"""Share (weighted) of the whole gold a line of another unit must hold to state the answer (the presence
test's carrying threshold)."""


@dataclass(slots=True)
class Fate:
    """What became of the statement an extraction wrote about the fact (:func:`statement_fate`)."""

    statement: frozenset[str]
    """Its tokens."""
    alive: list[str]
    """Units current when the question is asked that still hold it."""
    loss: tuple[str, str, str] | None
    """``(remover, before, after)`` of the copy removed last, when none is alive."""
    info: Information
    """The information it was followed for."""


def statement_fate(case: LineageCase, carries: Carrying, op: str, *, asked: frozenset[str] = frozenset(),
                   own: bool = False) -> Fate | None:
    """Where the statement ``op`` wrote about the evidence's fact went: the units holding it when the
    question is asked, or the write that removed the last copy before; ``None`` when ``op`` wrote no
    statement about the fact that keeps the answer's exact tokens, or it never reached memory.

    The statement followed is the one of ``op``'s written, non-memory outputs (its extracted
    facts) most about the fact (:func:`_aboutness`), keeping the answer's exact tokens (a
    statement with a number changed or another speaker's name is the extraction's own fault); a
    unit holds it when it keeps most of its words and every word of the gold it held: a unit written after
    ``op`` from the evidence, or one the decision reading ``op``'s statements compared them with
    (:func:`_compared`: a statement found stored already).
    The remover wrote the version ``after`` (a rewrite without the statement, a tombstone or a
    deletion marker) of the unit whose version ``before`` held it; there is none when the statement
    kept none of the gold its sentence said (:func:`_kept_none`). With ``own``, the units ``op``
    wrote itself count too, as statements and as holders (an extraction that writes its memory
    into the unit it read).
    """
    index = case.index
    info = carries.info
    question = _weights(index, asked)
    scored = [(_aboutness(info, question, tokens), position, tokens)
              for position, tokens in enumerate(_statements(index, op, own=own, info=info))]
    about = [item for item in scored if item[0] > 0]
    if not about:
        return None
    _, _, statement = max(about, key=lambda item: (item[0], -item[1]))
    if not info.exact <= statement:
        return None
    after_op, before_question = index.order(op), case.query_time
    compared = _compared(index, op) - carries.descendants
    kept = sorted(
        (v for v in chain(carries.descendants, compared)
         if index.is_stored(v) and (after_op < index.produced_at(v) or (own and index.producer(v) == op)
                                    or v in compared)
         and index.produced_at(v) < before_question
         and not index.data(v).get("deleted") and keeps(index, v, statement, info)),
        key=lambda v: (index.produced_at(v), v))
    if not kept:
        return None
    alive, losses = [], []
    for name in dict.fromkeys(index.data(v)["name"] for v in kept):
        removed = _removal(case, name, set(kept))
        if removed is None:
            alive.append(str(index.state_at(name, before_question)))
        else:
            losses.append(removed)
    loss = None if alive else max(losses, key=lambda item: (index.order(item[0]), item[0]))
    if loss is not None and _kept_none(info, statement, index.message_text(carries.evidence)):
        # The units holding the statement never held the answer, so the write that removed the last of
        # them lost nothing the answer needed (its repair restores a unit without it): the extraction that
        # wrote the fact without the answer did.
        loss = None
    return Fate(statement, alive, loss, info)


def _kept_none(info: Information, statement: frozenset[str], message: str | None) -> bool:
    """Whether ``statement`` keeps none of the gold its evidence sentence said, where that gold is two words
    or more, or a name, number or month the evidence ``message`` said (:func:`.presence.salient`).

    A paraphrase says a fact in other words, and a lone plain word of the gold is the one it most often
    says by a synonym ("had a great time" for "amazing"); a statement that keeps none of several gold words,
    or not the name the message said ("watch a few movies" for "Home Alone"), did not say the answer.
    """
    if not info.gold or statement & info.gold.keys():
        return False
    return _specific(info, message)


def _specific(info: Information, message: str | None) -> bool:
    """Whether the gold the evidence sentence said is two words or more, or a name, number or month the
    evidence ``message`` said (:func:`.presence.salient`): what no paraphrase or other fact says by chance,
    where a lone plain word is often said by a synonym or by another message."""
    return len(info.gold) >= _NONE_KEPT_WORDS or bool(salient(info, message))


def _compared(index: GraphIndex, op: str) -> set[str]:
    """The memory units the write-side ops reading ``op``'s statements read beside them: the memories a
    decision compared the new facts with (mem0 1.x's update decision is shown the similar memories).

    One of them that already states what ``op`` wrote holds the statement as a unit written from it
    would: a decision that finds the fact there writes nothing new (a deduplication), and the statement
    is in memory though ``op``'s own facts made no unit.
    """
    found: set[str] = set()
    for written in index.written(op):
        if index.is_stored(written):
            continue
        for reader in index.readers(written):
            if index.category(reader) not in _READ_SIDE and not index.is_step(reader):
                found.update(v for v in index.inputs(reader) if index.is_stored(v) and _memory(index, v))
    return found


def _statements(index: GraphIndex, op: str, *, own: bool = False, info: Information | None = None
                ) -> list[frozenset[str]]:
    """The tokens of each statement ``op`` wrote, in order: the pieces of what it wrote that are not memory
    units (with ``own``, its units too) and have :data:`_MIN_WORDS` words. A sentence quoted word for word
    from a message is the input passed on (a memcell keeps the messages it was cut from), not a
    statement the extractor wrote.

    Given ``info``, a statement that holds the gold's common words apart does not say them
    (:meth:`.Information.together`): "passed away last week, ... a tough time" says nothing of "a few
    times a week", and is followed, and judged, without them.
    """
    found = []
    for v in index.written(op):
        if not own and index.is_stored(v):
            continue
        for text, tokens in index.pieces(v):
            if len(tokens) < _MIN_WORDS or index.quoted_message(text):
                continue
            if info is not None and info.spread and info.gold.keys() <= tokens and not info.together(text):
                tokens = tokens - info.gold.keys()
            found.append(tokens)
    return found


def wrote_about(case: LineageCase, carries: Carrying, op: str, *, asked: frozenset[str] = frozenset()
                ) -> bool | None:
    """Whether ``op`` wrote a statement about the evidence's fact (:func:`_aboutness`); ``None`` when it
    wrote no statement at all (messages it passed on word for word aside)."""
    index, info = case.index, carries.info
    question, said = _weights(index, asked), _weights(index, tokenize(info.text))
    statements = _statements(index, op)
    if not statements:
        return None
    return any(_aboutness(info, question, tokens, said) > 0 for tokens in statements)


def stored_instead(case: LineageCase, carries: Carrying, op: str, *, asked: frozenset[str] = frozenset(),
                   gold: Information | None = None, said: bool = False) -> list[str]:
    """Units alive in the question's stores when it is asked, that the answer's context does not hold,
    and that hold what memory had for the fact, when extraction ``op`` wrote statements from the
    evidence none of which is about the fact (:func:`wrote_about` is ``False``); else ``[]``.

    Such an extraction did its job on what the message said as facts: an evidence id may
    name the turn beside the one stating the answer (a photo turn, a question before its
    reply), and an abstractive gold ("Likely no", "thoughtful") is inferred from a fact in
    other words. Nothing shows it dropped the fact, and what it did write is memory the
    question's search could return. What memory held, best first:

    * a unit with a line stating the whole ``gold`` (:data:`_STATES_GOLD_SHARE` of it, its
      exact tokens, and a word of the question besides them and its dates: a "3" in a line about another
      thing does not answer "how many turtles"), written from any message: an extractor
      dedupes, speakers repeat; not for a date gold (a month, a year), which every fact of its
      session holds, nor a unit from elsewhere dated away from the month the question names
      (:meth:`.Carrying.dated_otherwise`: another event told in the same words); when the evidence
      sentence states the answer (``said``) and says every word of the gold, two words or more or a
      name, number or month (:func:`_specific`), only a unit ``op`` read (an additive extractor is
      shown the similar memories and writes only what is new): the message said the fact, and an
      extraction that wrote only its other parts without having seen it stored dropped it (a repaired
      one stores it in the speaker's memory), whatever copy another message left (the other speaker's
      reply restating it);
    * else, unless the evidence sentence states the answer (``said``), the current versions of the
      units written from the evidence itself that keep one of
      ``op``'s statements (:func:`keeps`: not a unit a decision that read its facts only touched)
      and restate part of the message (:meth:`.Carrying.restates_message`: a fact that keeps
      nothing of it but its date and speaker left its content unstored), when one of ``op``'s
      statements names the speaker
      asked about (a statement given to the other speaker is the extraction's own fault) and
      they keep that name; none if the context holds one of them already (the reader had what
      the extraction kept), or if the message said gold words and none of them keeps one (a search
      returning them would have handed the reader the message's other parts, not the answer).

    Sorted by name within each kind, so the choice does not depend on hash order.
    """
    index, info = case.index, carries.info
    if carries.structural or wrote_about(case, carries, op, asked=asked) is not False:
        return []
    unread = unread_by(case)
    shown: set[str] | None = None
    if (said and gold is not None and gold.gold.keys() <= info.gold.keys()
            and _specific(info, index.message_text(carries.evidence))):
        # The message said the whole answer in words no other message says by chance: the extraction that
        # wrote its other parts dropped it, unless it was shown a memory saying it (an additive extractor,
        # mem0 2.x's, reads the similar memories and writes only what is new).
        shown = {str(index.data(v).get("name")) for v in index.inputs(op) if index.is_stored(v)}

    def excuses(unit: str) -> bool:
        return not carries.dated_otherwise(unit) and (
            shown is None or str(index.data(unit).get("name")) in shown)

    found = stating_gold(case, gold, info.exact, _topic(case, carries, asked)) if gold is not None else []
    if found := [v for v in found if excuses(v)]:
        return found
    if gold is not None and (found := [v for v in stating_gold(case, gold, info.exact, asked,
                                                               session_of=carries.evidence)
                                       if excuses(v)]):
        return found
    if said:
        # The evidence sentence states the answer (``said``): no turn beside the one saying it, no gold
        # inferred. What the extraction wrote about the message's other parts never held it, and a search
        # returning it would not have given the reader the answer: the extraction dropped it.
        return []
    speaker = info.exact - info.gold.keys()
    statements = _statements(index, op)
    if not any(speaker <= tokens for tokens in statements):
        return []
    # The units that keep one of its statements: what this extraction wrote, not a unit a decision that
    # read its facts only touched.
    own = [current for v in sorted(carries.written_from) if index.is_stored(v) and _memory(index, v)
           and (current := _alive_at_question(case, v)) is not None
           and carries.restates_message(current, speaker)
           and any(keeps(index, current, statement, info) for statement in statements)]
    if info.said and not any(index.tokens(v) & info.said for v in own):
        # The message said some of the gold ("our two teams will fight for the championship"), under the half
        # that rules out a turn beside the answer, and no unit the extraction wrote keeps a word of it ("John
        # is a Manchester City fan"): a search returning them would have handed the reader the message's
        # other parts, not the answer, so the search's miss decided nothing. The extraction that left out
        # what the message said of the answer did. An answer none of whose words the message said (inferred
        # from the fact) leaves the units as what memory had of it.
        return []
    return list(dict.fromkeys(own)) if all(unread(v) for v in own) else []


def held_already(case: LineageCase, carries: Carrying, op: str, *, asked: frozenset[str] = frozenset(),
                 gold: Information | None = None) -> list[str]:
    """The memory units extraction ``op`` read that state the evidence's fact, alive when the question is
    asked and not held by the answer's context, when ``op`` wrote no statement at all; else ``[]``.
    Sorted by name.

    A unit states the fact when a statement of it holds :data:`_HELD_SHARE` of the sentence stating it
    and of the gold's words the message says, or a line of it states the whole ``gold``
    (:func:`stating_gold`'s test). An additive extractor (mem0 2.x's) is shown the memories most
    similar to the message and writes only facts they do not hold yet: one that wrote nothing after
    reading a memory stating the fact found it held (a deduplication), and dropped nothing. A
    repaired extraction would have written nothing new either; what memory held is the unit it read.
    """
    index, info = case.index, carries.info
    if carries.structural or _statements(index, op):
        return []
    said = _weights(index, tokenize(info.text))
    whole = _states_whole(gold, info.exact, _topic(case, carries, asked)) if gold is not None else None
    unread = unread_by(case)
    found: dict[str, None] = {}
    for variable in sorted(index.inputs(op)):
        if not (index.is_stored(variable) and _memory(index, variable)):
            continue
        if not any(weighted_share(said, tokens) >= _HELD_SHARE and info.gold_in(tokens, threshold=_HELD_SHARE)
                   for _, tokens in index.pieces(variable)) and not (
                whole is not None and any(whole(line) for line in _gold_lines(index, variable))):
            continue
        current = _alive_at_question(case, variable)
        if current is not None and unread(current):
            found[current] = None
    return list(found)


def _topic(case: LineageCase, carries: Carrying, asked: frozenset[str]) -> frozenset[str]:
    """The question's words (``asked``) less the name of who said the evidence: what the question asks
    about that person.

    The person asked about is named by every memory of theirs; where the message says who spoke only
    in its record (a ``name`` field, a metadata line), the name is not among the information's exact
    tokens, and a line about anything else of theirs ("Tim's favorite song to play on the piano")
    would pass for one answering "What new activity has Tim started learning?" by the name alone.
    """
    return asked - tokenize(case.index.speaker(carries.evidence))


_MONTH = "|".join(sorted(MONTH_NAMES))
_DAY_OF_MONTH = re.compile(rf"\b\d{{1,2}}(?:st|nd|rd|th)?(\s+(?:of\s+)?(?:{_MONTH})\b)"
                           rf"|\b({_MONTH})\s+\d{{1,2}}(?:st|nd|rd|th)?(,?\s+\d{{4}})\b", re.IGNORECASE)


def _gold_lines(index: GraphIndex, variable: str) -> list[frozenset[str]]:
    """Token sets of ``variable``'s lines (:meth:`.GraphIndex.lines`) with the day of a date left out.

    mem0 dates every memory by its message ("... (9 November 2022)"): the day says when, not how many,
    and a count gold ("nine" tournaments, "3" children) is not stated by every memory of the ninth or
    the third of a month.
    """
    lines = index.lines(variable)
    if not any(t.isdigit() for line in lines for t in line):
        return lines
    return [tokenize(_DAY_OF_MONTH.sub(r"\1\2\3", line)) for line in split_lines(index.text(variable))]


def _states_whole(gold: Information, exact: frozenset[str], asked: frozenset[str], *,
                  topic_free: bool = False, dated: bool = False) -> Callable[[frozenset[str]], bool] | None:
    """The test of a line stating the whole ``gold``: :data:`_STATES_GOLD_SHARE` of it, its exact tokens and
    ``exact``, and a word of the question (``asked``) besides them and its dates (a "3" in a line about
    another thing does not answer "how many turtles"); ``None`` for no gold or a date gold (a month, a
    year), which every fact of its session holds, unless ``dated`` (the caller tells the line's date from
    its message's day: :func:`stating_gold`)."""
    if not gold.gold or (months_and_years(gold.gold) and not dated):
        return None
    weights, exact = gold.gold, gold.exact | exact
    # A date the question names is in every line of that day: no word of the question's topic.
    topic = frozenset(t for t in asked - exact if not t.isdigit() and t not in MONTH_NAMES)

    def states(line: frozenset[str]) -> bool:
        return (exact <= line and (topic_free or not topic or not topic.isdisjoint(line))
                and weighted_share(weights, line) >= _STATES_GOLD_SHARE)
    return states


def whole_gold_test(index: GraphIndex, gold: Information, exact: frozenset[str], asked: frozenset[str]
                    ) -> Callable[[str], bool] | None:
    """The test of a variable having a line that states the whole ``gold`` (:func:`_states_whole`: the
    gold, ``exact`` and a word of the question), built once for a case's loop; ``None`` for a date
    gold, which no line states whole."""
    states = _states_whole(gold, exact, asked)
    if states is None:
        return None
    return lambda variable: any(states(line) for line in _gold_lines(index, variable))


def stating_gold(case: LineageCase, gold: Information, exact: frozenset[str], asked: frozenset[str], *,
                 session_of: str | None = None, dated: bool = False) -> list[str]:
    """Memory units alive in the question's stores when it is asked, not held by the answer's context,
    with a line stating the whole ``gold`` (:func:`_states_whole`, ``exact`` the evidence's exact tokens).
    Sorted by name.

    With ``session_of`` (the evidence message), only units written from a message said the same day, whose
    line need not hold a word of the question: one conversation's turns of a day talk about one thing (a
    photo and what its speaker says of it next), so that day is what ties the unit to the question.

    With ``dated``, a date gold (a month, a year) is stated whole too, by a unit none of whose messages was
    said on a day of that month or year: mem0 dates every memory by its message, so the day a message was
    said is in every fact of it; a date that is not that day is what the sentence told ("last month" said
    on 1 January 2023, "Maria took a sunset picture at the beach last month (December 2022)").
    """
    index = case.index
    states = _states_whole(gold, exact, asked, topic_free=session_of is not None, dated=dated)
    if states is None:
        return []
    dates = months_and_years(gold.gold)
    day = _day_of(index, session_of) if session_of is not None else None
    if session_of is not None and day is None:
        return []
    unread = unread_by(case)
    weights, exact = gold.gold, gold.exact | exact
    keys = sorted(weights, key=lambda t: (-weights[t], t))[:4]
    found = []
    for variable in sorted(index.candidates(keys, required=exact, stores=case.stores)):
        if (index.produced_at(variable) < case.query_time and _memory(index, variable)
                and _alive_at_question(case, variable) == variable and unread(variable)
                and any(states(line) for line in _gold_lines(index, variable))
                and (day is None or any(_day_of(index, m) == day for m in index.origin_messages(variable)))
                and (not dates or _told_date(index, variable, dates))):
            found.append(variable)
    return found


def _told_date(index: GraphIndex, variable: str, dates: frozenset[str]) -> bool:
    """Whether ``variable``'s messages were all said on days outside the month or year ``dates`` name (and it
    has a dated one): the date it holds is what its sentence told, not the day it was said."""
    days = [_day_of(index, m) for m in index.origin_messages(variable)]
    return bool(days) and all(day is not None and not dates <= tokenize(day) for day in days)


def removed_on_day(case: LineageCase, gold: Information, exact: frozenset[str], asked: frozenset[str], *,
                   session_of: str, since: int) -> tuple[str, str, str] | None:
    """``(remover, before, after)``: the last write, after execution order ``since`` and before the question,
    that removed from a unit of the question's stores the last line stating the whole ``gold`` with a word
    of the question (:func:`_states_whole`), where the unit's version holding it was written from a message
    said on ``session_of``'s day; ``None`` when no such write did. ``after`` is the version (a rewrite, a
    tombstone) or deletion marker it wrote, and no later version before the question stated the gold again.

    One conversation's turns of a day talk about one thing, and an evidence id names one turn: the answer
    is often said in the turn beside it (the other speaker's lead-in or reply), whose unit is then what
    memory held of the answer. While that unit was stored, the answer was in memory whatever became of
    the named turn's own fact; the write that later removed it lost the answer.
    """
    states = _states_whole(gold, exact, asked)
    day = _day_of(case.index, session_of)
    if states is None or day is None:
        return None
    index = case.index
    weights, required = gold.gold, gold.exact | exact
    keys = sorted(weights, key=lambda t: (-weights[t], t))[:4]
    holding: dict[str, set[str]] = {}
    for variable in sorted(index.candidates(keys, required=required, stores=case.stores)):
        if (index.produced_at(variable) < case.query_time and _memory(index, variable)
                and not index.data(variable).get("deleted")
                and any(states(line) for line in _gold_lines(index, variable))
                and any(_day_of(index, m) == day for m in index.origin_messages(variable))):
            holding.setdefault(index.data(variable)["name"], set()).add(variable)
    found = [loss for name in sorted(holding) if (loss := _removal(case, name, holding[name])) is not None
             and since < index.order(loss[0]) < case.query_time
             and not any(states(line) for line in _gold_lines(index, loss[2]))]
    return max(found, key=lambda item: (index.order(item[0]), item[0])) if found else None


_BESIDE_TURNS = 2
"""Turns either side of an evidence message whose units may say its answer (:func:`said_beside`): the
other speaker's lead-in or reply, the speaker's next message."""


def said_beside(case: LineageCase, gold: Information, evidence: str) -> list[str]:
    """Memory units alive in the question's stores when it is asked, not held by the answer's context,
    written from a message within :data:`_BESIDE_TURNS` turns of ``evidence`` on its day, with a line stating
    the whole ``gold`` (:func:`_states_whole`: its exact tokens, no word of the question needed); none for a
    gold with a number or a month, which every memory of the day (dated by its message) or of a count may
    hold. Sorted by name.

    An evidence id names one turn, and the answer is often said in the turn beside it: the other speaker's
    reply restates it to the speaker ("be sure to call her!", "it's a gift to find peace and gratitude in
    them"), in the speaker's words or their own, and an app with one memory user per speaker stores it as the
    other speaker's memory. Its nearness to the named turn is what ties it to the question (it need not name
    the person asked: it was said to them); while it was in memory, the answer was.
    """
    index = case.index
    if not gold.gold or any(t.isdigit() or t in MONTH_NAMES for t in gold.gold):
        return []
    here, day = index.turn(evidence), _day_of(index, evidence)
    states = _states_whole(gold, frozenset(), frozenset(), topic_free=True)
    if here is None or day is None or states is None:
        return []

    def beside(message: str) -> bool:
        turn = index.turn(message)
        return (message != evidence and turn is not None and abs(turn - here) <= _BESIDE_TURNS
                and _day_of(index, message) == day)

    unread = unread_by(case)
    keys = sorted(gold.gold, key=lambda t: (-gold.gold[t], t))[:4]
    return [variable for variable in sorted(index.candidates(keys, required=gold.exact, stores=case.stores))
            if index.produced_at(variable) < case.query_time and _memory(index, variable)
            and _alive_at_question(case, variable) == variable and unread(variable)
            and any(states(line) for line in _gold_lines(index, variable))
            and any(beside(m) for m in index.origin_messages(variable))]


def untold_event(case: LineageCase, info: Information, evidence: str, what: frozenset[str]) -> frozenset[str]:
    """For a date gold (a month or a year in it), the words the question asks the event by (``what``: its
    words beyond names, numbers and months) that the evidence sentence says and no memory unit of the
    question's stores, written before the question from a message of the evidence's day, says; empty for
    another gold.

    A date is an event's: a reader answers "When did Melanie get hurt?" from a line saying she got hurt
    then, and a search finds that line by those words. An extraction that kept the date but told the
    event in other words ("had a setback due to an injury (September 2023)") or not at all (only another
    remark of the message, dated) lost which event the date is of, when memory tells it nowhere else. A
    unit of that day telling it (the turn beside the evidence, the other speaker's: one day's turns talk
    about one thing) keeps the event in memory beside the dated remark, and a reader given both ties
    them: then the date's statement still counts, and the search or the reader is judged.
    """
    if not any(t in MONTH_NAMES or (t.isdigit() and len(t) == 4) for t in info.gold):
        return frozenset()
    event = (frozenset(info.topic) - info.headed) & what
    day = _day_of(case.index, evidence)
    if not event or day is None:
        return frozenset()
    index = case.index
    told = {token for variable in index.candidates(event, stores=case.stores)
            if index.produced_at(variable) < case.query_time and _memory(index, variable)
            and any(_day_of(index, m) == day for m in index.origin_messages(variable))
            for token in index.tokens(variable) & event}
    return event - told


def _day_of(index: GraphIndex, message: str) -> str | None:
    """The day a message's header says it was sent (``8 may 2023``); ``None`` without a dated header."""
    day = spoken_day(split_header(index.message_text(message) or "")[0])
    return None if day is None else day.lower()


def _alive_at_question(case: LineageCase, variable: str) -> str | None:
    """The version of ``variable``'s unit current when the question is asked; ``None`` if it is gone."""
    index = case.index
    current = index.state_at(index.data(variable)["name"], case.query_time)
    return None if current is None or index.data(current).get("deleted") else current


def unread_by(case: LineageCase) -> Callable[[str], bool]:
    """The test of a variable the answer's context did not hold: its words are in no context (not the
    query) the generator read."""
    index = case.index
    contexts = [index.tokens(v) for v in index.inputs(case.generator)
                if index.data(v).get("kind") != VariableKind.QUERY]

    def unread(variable: str) -> bool:
        return not any(index.tokens(variable) <= held for held in contexts)
    return unread


def _memory(index: GraphIndex, variable: str) -> bool:
    """A memory unit, or written by the write side: a list of results a retrieval wrote or a later step
    read (named by the ids it lists) is no memory unit."""
    if index.data(variable).get("kind") in STORED_KINDS:
        return True
    producer = index.producer(variable)
    return producer is not None and index.category(producer) not in _READ_SIDE


def statement_loss(case: LineageCase, carries: Carrying, op: str, *, asked: frozenset[str] = frozenset()
                   ) -> tuple[str, str, str] | None:
    """``(remover, before, after)`` when what ``op`` wrote about the evidence's fact reached memory and a
    later write removed every copy before the question (:func:`statement_fate`); else ``None``."""
    fate = statement_fate(case, carries, op, asked=asked)
    return fate.loss if fate is not None else None


def keeps(index: GraphIndex, variable: str, statement: frozenset[str], info: Information) -> bool:
    """Whether ``variable`` still states ``statement``: most of its words (IDF-weighted) and every word of
    the gold it held."""
    tokens = index.tokens(variable)
    if not (statement & info.gold.keys()) <= tokens:
        return False
    total = math.fsum(index.idf(t) for t in statement)
    return bool(total) and math.fsum(index.idf(t) for t in statement & tokens) / total >= _KEPT_SHARE


def _weights(index: GraphIndex, tokens: frozenset[str]) -> dict[str, float]:
    return {t: index.idf(t) for t in tokens}


def _aboutness(info: Information, asked: dict[str, float], tokens: frozenset[str],
               said: dict[str, float] | None = None) -> float:
    """How much a statement is about the fact: its shares of the gold, of the sentence stating it and
    of the question's words (what a reader finds the fact by), IDF-weighted and summed; 0 when none
    reaches its bar (half the gold or the question, :meth:`.Information.related` for the sentence).

    ``said`` weighs the sentence's own words instead, without the message's header (whose date and
    speaker every fact of the session has): to tell whether a statement is about the fact at all.
    """
    gold, question = weighted_share(info.gold, tokens), weighted_share(asked, tokens)
    if said is None:
        sentence, near = weighted_share(info.sentence, tokens), info.related(tokens)
    else:
        sentence = weighted_share(said, tokens)
        near = sentence >= _ABOUT_SENTENCE_SHARE
    if gold >= _ABOUT_GOLD_SHARE or near or question >= _ABOUT_QUESTION_SHARE:
        return gold + sentence + question
    return 0.0


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
