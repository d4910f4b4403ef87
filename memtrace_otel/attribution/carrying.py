"""Does a variable still carry what a failed answer needed? The lineage engine's presence test.

One :class:`LineageCase` per failed evaluation holds what every evidence
message's walk shares (the answer's slice, when the question started being
answered, the stores it read); one :class:`Carrying` per evidence message
answers "does this variable carry its information?" -- from captured content
(:mod:`.presence`'s word shares, a paraphrase close in embedding space, a list
of record ids standing for the records), or from lineage alone when content
was not captured -- and walks forward from the message to the carriers it
reached and the operations that dropped it (judged by what they wrote, not
by their prompts or raw model responses). Per-case work is proportional to the case's slice and
lineage; store-wide questions go through the graph's index.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, replace

import networkx as nx

from memtrace_otel.attribution.anchored import anchor_day, dated_episode, header_day
from memtrace_otel.attribution.graph_index import STORED_KINDS, GraphIndex
from memtrace_otel.attribution.presence import (
    Information,
    salient,
    split_header,
    tokenize,
    weighted_share,
)
from memtrace_otel.attribution.ranking import Embedder
from memtrace_otel.graph.node_types import OPERATION
from memtrace_otel.semconv import Category, VariableKind
from memtrace_otel.text import MONTH_NAMES

__all__ = ["Carrying", "LineageCase", "answer_history", "truncated"]

_WRITE_SIDE = frozenset(
    {Category.INGEST, Category.EXTRACTION, Category.UPDATE, Category.DELETION, Category.OTHER}
)
_READ_SIDE = frozenset({Category.RETRIEVAL, Category.RERANK})
_QUERY_SIDE = _READ_SIDE | {Category.GENERATION}
_STORED_SEARCH_KEYS = 4
# A statement this close (cosine) to the evidence sentence says the same fact in other words; half the
# gold's words must still be there. Measured on LoCoMo turns against extracted third-person facts:
# three in four true pairs reach it, one in ten unrelated pairs of one conversation does.
_PARAPHRASE_SIMILARITY = 0.55
_PARAPHRASE_GOLD_SHARE = 0.5
_PARAPHRASE_MIN_WORDS = 3  # a bare date or name is not a statement to compare
# A fact written from a message restates one part of it: a tenth of the message's IDF weight (its rare
# words) ties a statement to it when the gold's words are not there to (an abstractive gold).
_RESTATED_SHARE = 0.1
_NOTES = re.compile(r"\[[^\]]*\]")
"""A bracketed note in a message: a shared photo's caption (``[shares a photo of ...]``), a resolved time."""


@dataclass(slots=True)
class LineageCase:
    """Per-case facts shared by the walk over each evidence message (read-only)."""

    index: GraphIndex
    answer: str
    generator: str
    query_time: int
    answer_slice: set[str]
    structural: bool
    stores: list[str] | None = None
    """Stores the answer's retrievals read (``None``: not named): the memory the question had."""
    foreign: frozenset[str] = frozenset()
    """Read-side ops of other questions whose outputs the answerer is linked to (by value only)."""
    semantic: Embedder | None = None
    """The offline embedding model that tells paraphrases (``None``: word shares only)."""
    _operations: list[str] | None = None
    _read_side: list[str] | None = None

    @classmethod
    def of(cls, index: GraphIndex, answer: str, generator: str, *, semantic: Embedder | None = None
           ) -> LineageCase:
        """The case of ``answer``, written by ``generator``."""
        answer_slice, own, foreign = _with_question_reads(index, generator, answer_history(index, answer))
        operations = [n for n in answer_slice if index.data(n).get("type") == OPERATION]
        query_time = min([_query_time(index, generator, operations), *(index.order(op) for op in own)])
        return cls(index, answer, generator, query_time, answer_slice,
                   structural=not index.has_content, stores=_read_stores(index, operations),
                   foreign=frozenset(foreign), semantic=semantic, _operations=operations)

    # The slice holds the whole write history (tens of thousands of nodes on a real conversation)
    # and the walks over each evidence message ask for its few read-side operations again and
    # again: both lists are made once per case. They keep the slice's own iteration order (the
    # second sorted stably), so filtering them gives what filtering and sorting the slice gave.
    def operations(self) -> list[str]:
        """The operations in the answer's slice."""
        if self._operations is None:
            self._operations = [n for n in self.answer_slice if self.index.data(n).get("type") == OPERATION]
        return self._operations

    def read_side(self) -> list[str]:
        """The slice's operations at or after the question (``query_time``), in execution order."""
        if self._read_side is None:
            index = self.index
            self._read_side = sorted((op for op in self.operations() if index.order(op) >= self.query_time),
                                     key=index.order)
        return self._read_side


class Carrying:
    """Presence test for one evidence message's information: content, or lineage without it."""

    def __init__(self, case: LineageCase, evidence: str, info: Information, *, structural: bool,
                 stated: Information | None = None) -> None:
        self.case, self.evidence, self.info, self.structural = case, evidence, info, structural
        # A gold none of whose words the message holds (an inference: "Likely no") is not the same as
        # no gold (a user's thumbs-down): only the first leaves the whole message as the fact.
        self._abstractive = stated is not None and not info.gold
        # The whole gold, when it says more than the evidence's words hold (an abstractive gold) and
        # is a statement, not a bare date or name: what a memory written from the evidence may say.
        self.stated = stated if (stated is not None and len(stated.gold) >= _PARAPHRASE_MIN_WORDS
                                 and len(stated.gold) > len(info.gold)) else None
        # The gold's words the message does not say: what a memory must say to carry it (the date a
        # relative time was said on, which every line of the session holds, is not enough).
        self._unsaid = frozenset(self.stated.gold) - frozenset(info.gold) if self.stated else frozenset()
        self._descendants: set[str] | None = None
        self._written_from: set[str] | None = None
        self._forward: tuple[list[str], list[str]] | None = None
        self._stored: list[str] | None = None
        self._memo: dict[str, bool] = {}
        self._anchor: frozenset[str] | bool | None = False  # False: not computed yet
        self._asked_month: frozenset[str] | None = None
        self._salient: frozenset[str] | None = None
        self._spoken: frozenset[str] | None = None  # the message's words outside its bracketed notes
        self._own: dict[frozenset[str], bool] = {}  # a line's quoted messages -> the evidence's speaker's
        self._together: dict[str, bool] = {}  # a line's text -> it says the gold's words together
        self._states: dict[frozenset[str], bool] = {}  # a line's tokens -> it states the fact
        # What each distinct line decides (by its number in the graph, GraphIndex.line_set): the lines
        # sorted so far, those saying the gold's words together, and those stating the fact, the
        # evidence's speaker's and another speaker's naming the person asked about; for a fact that is a
        # whole message, those quoting another message and those that may hold the evidence's words.
        self._lines_sorted: set[int] = set()
        self._lines_together: set[int] = set()
        self._lines_stating: set[int] = set()
        self._lines_stating_other: set[int] = set()
        self._lines_foreign: set[int] = set()  # quoting another message word for word
        self._lines_admitted: set[int] = set()  # quoting none, or the evidence
        self._who: frozenset[str] | None = None
        self._evidence_day: frozenset[str] | None = None
        self._undated: Information | bool | None = False  # False: not computed yet

    def __call__(self, variable: str) -> bool:
        found = self._memo.get(variable)
        if found is None:
            found = self._memo[variable] = self._test(variable)
        return found

    def _test(self, variable: str) -> bool:
        index = self.case.index
        if index.data(variable).get("deleted"):
            return False
        if self.structural or index.content(variable) is None:
            return variable == self.evidence or variable in self.descendants
        original = index.original(variable)
        if original is not None:
            return self(original)
        if variable != self.evidence and not self._holds_evidence_record(variable):
            return False
        if self._restamped(variable):
            return True
        if self.dated_otherwise(variable):
            return False
        if self._carried_by_lines(variable):
            return True
        if self._answers(variable):
            return True
        if self.case.semantic is not None and self.info.text and self._paraphrases(variable):
            return True
        if variable in self.descendants and self._keeps_rare_gold(variable):
            return True
        if variable in self.written_from and self._states_gold_of_sentence(variable):
            return True
        if self._abstractive and variable in self.written_from and self._restates_message(variable):
            return True
        if variable in self.descendants and self._dated_episode(variable):
            return True
        if self.stated is not None and variable in self.descendants and any(
                self.stated.gold_in(line) and self._unsaid <= line and self.info.tells_event(line)
                and not quoted - {self.evidence}
                for line, quoted in zip(index.lines(variable), index.line_sources(variable), strict=True)):
            # Written from the evidence, it says the gold the message said in other words. Not in a line
            # another message says word for word: a window of raw messages descends from every one of
            # them, and a session's other turn may say the same date of another event.
            return True
        if variable in self.descendants and self._keeps_earlier_statement(variable):
            return True
        if index.data(variable).get("kind") not in STORED_KINDS and self._references_carrier(variable):
            return True
        # Captured content is truncated (MEMTRACE_CONTENT_MAX_CHARS): what is cut off is unknown,
        # so a truncated variable carries what its producer read.
        if truncated(index, variable):
            producer = index.producer(variable)
            return producer is not None and any(self(v) for v in index.inputs(producer))
        return False

    def _carried_by_lines(self, variable: str) -> bool:
        """The word test (:meth:`.Information.carried_by_lines`), on the lines that can state the
        evidence's fact.

        In a window or buffer of raw messages each message is a line, and a line
        quoting another speaker's message word for word is that speaker's
        statement: a reply that names the answer ("I've never been to Jasper")
        does not hold the evidence's fact. It does when it restates it (close in
        embedding space to the evidence sentence); a later message of the same
        speaker about it is the speaker saying it again.
        """
        index, info = self.case.index, self.info
        tokens = index.tokens(variable)
        if not info or (not info.whole and not info.gold_in(tokens)):
            return False  # both word tests below need the gold in these tokens first
        if not info.sentence and not info.spread and not info.whole:
            return True
        # The walk tests every version of a window of raw messages, and the versions share most of
        # their lines: each distinct line is sorted once for this evidence (_sort_lines), and a version
        # is decided by which of the sorted sets its lines meet.
        numbers = index.line_set(variable)
        self._sort_lines(numbers)
        kept = numbers
        if info.spread:
            # Common gold words carry the fact only said together (:meth:`.Information.together`).
            kept = numbers & self._lines_together
            if not kept:
                return False
        if info.whole:
            # The fact is the whole message (no sentence singled out): a memory's statements about it may
            # spread its words over several lines (an extractor writes a fact per sentence), but in a
            # window of raw messages each line is its own message: a window of a hundred turns holds most
            # words of any message's sentence across the other turns, and none of them is this message's
            # saying. So when a line quotes another message word for word, the text's words are those of
            # its lines that quote none or the evidence.
            if not kept.isdisjoint(self._lines_foreign):
                tokens = frozenset().union(*map(index.line_tokens, kept & self._lines_admitted))
            if not info.gold_in(tokens):
                return False
        if not info.sentence or not self._lines_stating.isdisjoint(numbers):
            return True
        if info.whole:
            found = self._states.get(tokens)
            if found is None:
                found = self._states[tokens] = info.states(tokens)
            if found:
                return True
        # Another speaker's line says it of the person asked about only by naming them: "My mother also
        # passed away last year" is the other speaker's mother, however close to the evidence it reads.
        if self._lines_stating_other.isdisjoint(numbers):
            return False
        if self.case.semantic is None or not info.text:
            return True  # without a model, words are all there is to go by
        # The texts, in the order and with the repeats, that the version's lines give: the embedder keeps
        # the vectors of texts by the call that first met them.
        other, number = self._lines_stating_other, index.line_number
        said = [split_header(text)[1] for text in index.line_texts(variable) if number(text) in other]
        vectors = self.case.semantic([info.text, *said])
        return bool(max((vectors[1:] @ vectors[0]).tolist()) >= _PARAPHRASE_SIMILARITY)

    def _sort_lines(self, numbers: frozenset[int]) -> None:
        """Sort the lines among ``numbers`` not met yet by what they decide for this evidence, each by its
        text alone: whether it says the gold's words together, quotes another message word for word or
        may be the evidence's (for a fact that is a whole message), and states the fact as the evidence's
        speaker's line or as another speaker's naming the person asked about."""
        new = numbers - self._lines_sorted
        if not new:
            return
        index, info, evidence = self.case.index, self.info, self.evidence
        if self._who is None:
            self._who = tokenize(index.speaker(evidence)) & info.asked
        who, states, exact, gold = self._who, self._states, info.exact, info.gold.keys()
        for number in new:
            text = index.line_text(number)
            if info.spread and not self._said_together(text):
                continue
            self._lines_together.add(number)
            quoted = index.line_quotes(text)
            if info.whole:
                if quoted - {evidence}:
                    self._lines_foreign.add(number)
                if not quoted or evidence in quoted:
                    self._lines_admitted.add(number)
            line = index.line_tokens(number)
            if not exact <= line or (gold and line.isdisjoint(gold)):
                continue  # it lacks the gold (Information.gold_in): it states nothing of the fact
            if self._own_quote(quoted):
                stating = self._lines_stating
            elif who <= line:
                stating = self._lines_stating_other
            else:
                continue
            found = states.get(line)
            if found is None:
                found = states[line] = info.states(line)
            if found:
                stating.add(number)
        self._lines_sorted |= new

    def _own_quote(self, quoted: frozenset[str]) -> bool:
        """Whether a line quoting the messages ``quoted`` word for word (none: quoting none) may be the
        evidence's speaker's statement."""
        if not quoted:
            return True
        found = self._own.get(quoted)
        if found is None:
            index, said_by = self.case.index, self.case.index.speaker(self.evidence)
            found = self._own[quoted] = (self.evidence in quoted or said_by is None
                                         or any(index.speaker(m) in (said_by, None) for m in quoted))
        return found

    def _said_together(self, text: str) -> bool:
        found = self._together.get(text)
        if found is None:
            found = self._together[text] = self.info.together(text)
        return found

    def _restamped(self, variable: str) -> bool:
        """Whether ``variable``, a version of a memory unit written from the evidence, states the fact but for
        the day the evidence was said on, which the question names ("What did Maria mention on 31 July,
        2023?").

        That day is when the message was said, not what it said: the app keeps it in the record (mem0's
        ``timestamp`` metadata, shown beside each memory the search returns), and the statement need not
        repeat it. mem0's update decision merges a related fact into the unit and dates the merge by the
        newer message ("... a homeless shelter; Maria volunteered at a homeless shelter last week (the
        week before 9 August 2023)"): the statement the evidence put there is still in it, and a reader
        asked about that day's mention answers from it. The rest of the test is the word test's (the gold,
        the sentence, the topic's other words); a unit of another message is judged by its own words, and a
        line quoting another message word for word is that message's.
        """
        undated = self._undated
        if undated is False:
            day, info = self._day(), self.info
            undated = self._undated = replace(info, topic={
                t: w for t, w in info.topic.items() if t not in day}) if day & info.topic.keys() else None
        if not isinstance(undated, Information) or not self.case.index.is_stored(variable) \
                or not self._from_evidence(variable):
            return False
        index = self.case.index
        # A line quoting another message word for word is that message (a window of raw messages), and
        # common gold words carry the fact only said together (:meth:`.Information.together`).
        lines = [line for line, quoted, text in zip(index.lines(variable), index.line_sources(variable),
                                                    index.line_texts(variable), strict=True)
                 if not quoted - {self.evidence} and undated.together(text)]
        return undated.carried_by_lines(index.tokens(variable), lines)

    def _keeps_earlier_statement(self, variable: str) -> bool:
        """Whether an earlier version of ``variable``'s unit, written from the evidence, carried the
        information and ``variable`` keeps each of its statements word for word.

        An update that joins a new fact to a memory (mem0's decision merges related facts into one
        unit) rewrites the unit, and what the evidence's write put there stays as it was: the merged
        version holds the same statement, so it carries what that statement carried, though it was
        written from another message (a carrier only tied to the evidence by a test on its own words
        would otherwise lose it).
        """
        index = self.case.index
        if not index.is_stored(variable):
            return False
        versions = index.versions(index.data(variable)["name"])
        if variable not in versions:
            return False
        kept = {tokens for _, tokens in index.pieces(variable)}
        return any(earlier in self.written_from and index.pieces(earlier)
                   and all(tokens in kept for _, tokens in index.pieces(earlier)) and self(earlier)
                   for earlier in versions[:versions.index(variable)])

    def dated_otherwise(self, variable: str) -> bool:
        """Whether ``variable`` is a memory from elsewhere dated away from the month the question asks about.

        A question that names a month and year ("What did John organize with his friends on
        May 8, 2022?") asks about the event of that time, and the evidence message, said then,
        bears that date. A memory not written from the evidence whose text and record never
        name that month of that year tells another event with the same words (a tournament in
        March is not the one organised in May): it does not answer the question, however many
        of the gold's words it holds. Memories written from the evidence are judged as before
        (their fact may keep a relative time instead of the date); one only tied to it (written by
        an extraction that read a memory of it, as mem0's reads the similar memories) is not the
        evidence's fact and is dated like any other.
        """
        index = self.case.index
        when = self._asked_month
        if when is None:
            months = sorted(t for t in self.info.asked if t in MONTH_NAMES)
            years = sorted(t for t in self.info.asked if len(t) == 4 and t.isdigit())
            found = frozenset((*months, *years)) if len(months) == 1 and len(years) == 1 else frozenset()
            # Only when the evidence itself is dated then: else the question's date is not the message's.
            when = self._asked_month = found if found <= index.tokens(self.evidence) else frozenset()
        if not when or not index.is_stored(variable) or variable == self.evidence:
            return False
        if variable in self.written_from:
            return False
        return not when <= index.tokens(variable)

    def _dated_episode(self, variable: str) -> bool:
        """Whether ``variable``, written from the evidence, is an episode dated the day the message
        said the gold relative to, telling its event (:mod:`.anchored`)."""
        if self._anchor is False:
            self._anchor = anchor_day(self.case.index, self.evidence, self.info)
        day = self._anchor
        return isinstance(day, frozenset) and dated_episode(self.case.index, variable, self.info, day,
                                                            self.case.semantic)

    def _holds_evidence_record(self, variable: str) -> bool:
        """Whether ``variable``, if it holds messages as records (a buffer, a memcell), holds the
        evidence's: a container of raw messages that left it out does not carry it, whatever a
        summary or title of it quotes."""
        held = self.case.index.held_messages(variable)
        return held is None or self.case.index.message_text(self.evidence) in held

    def about(self, variable: str, *, besides: str | None = None) -> bool:
        """Whether ``variable`` states something about the same fact (much of the sentence stating it),
        carrying it or not, that ``besides`` (its previous version) did not: what tells a lossy
        rewrite of the fact from an unrelated write, or from a window that stayed as it was."""
        index = self.case.index
        if self.structural or index.content(variable) is None:
            return variable in self.descendants
        before = {text for text, _ in index.pieces(besides)} if besides is not None else set()
        return any(self.info.related(tokens) for text, tokens in index.pieces(variable) if text not in before)

    def _answers(self, variable: str) -> bool:
        """Whether a statement of ``variable`` answers the question as the evidence sentence does
        (:meth:`.Information.answers`), in the extractor's words or another message's.

        Searched store-wide: a memory written from another turn that says the same thing
        of the same person holds the information all the same (an extractor dedupes, a
        user repeats). A statement quoted word for word from another message is that
        message, not a memory of it. The person asked about must be named, though the message
        names its speaker only in its record (a ``name`` field, not a ``Caroline:`` header): the
        same words said of someone else answer another question.
        """
        index = self.case.index
        who = tokenize(index.speaker(self.evidence)) & self.info.asked
        return any(self.info.answers(tokens) and who <= tokens
                   and not index.quoted_message(text) - {self.evidence}
                   and self.info.together(text) for text, tokens in index.pieces(variable))

    def _keeps_rare_gold(self, variable: str) -> bool:
        """Whether a statement of ``variable``, written from the evidence, keeps the whole gold and
        enough to tell the fact (:meth:`.Information.identified_by`), little as it kept of the
        evidence sentence's other words.

        An extractor leaves out circumstances ("I was out walking in my neighborhood
        when I came across a rainbow sidewalk" -> "found a rainbow sidewalk") and
        fillers ("So much has happened since we last spoke - I went to ..."). Only
        a statement written from the evidence counts: another message's words
        about the same subject are that message's fact (and a sentence quoted word
        for word from another message is that message's).
        """
        index = self.case.index
        return any(self.info.identified_by(tokens) and not index.quoted_message(text) - {self.evidence}
                   and self.info.together(text) for text, tokens in self._own_pieces(variable))

    def _own_pieces(self, variable: str) -> list[tuple[str, frozenset[str]]]:
        """The statements of ``variable`` (a descendant of the evidence) that may be the evidence's fact: all
        of a memory unit one of whose versions up to it was written from the evidence (:attr:`written_from`),
        and of what a search passed on, the statements of the units it read that were; besides, any statement
        dated the day the evidence was said on (:meth:`_day`).

        mem0's update decision reads the memories similar to the new facts: a unit written from another
        message descends from the evidence through that read, and its fact is that message's. mem0 dates
        every fact by its message, so one said on another day holds the month and year a date gold is
        whatever event it tells ("Nate has a dog named Max that he enjoys taking for walks (25 May 2022)",
        written five days after "this is Max!", for "When did Nate adopt Max?"). One said the same day may
        tell the same event again ("John's doctor mentioned that his injury (16 November 2023)"), and stays.
        """
        index, day = self.case.index, self._day()
        if index.is_stored(variable):
            if self._from_evidence(variable):
                return index.pieces(variable)
            return [(text, tokens) for text, tokens in index.pieces(variable) if day and day <= tokens]
        producer = index.producer(variable)
        units = [v for v in index.inputs(producer) if index.is_stored(v)] if producer is not None else []
        if not units:
            return index.pieces(variable)
        own = {text for v in units if self._from_evidence(v) for text, _ in index.pieces(v)}
        return [(text, tokens) for text, tokens in index.pieces(variable)
                if text in own or (day and day <= tokens)]

    def _day(self) -> frozenset[str]:
        """The day the evidence was said on (day, month and year of its header), or nothing."""
        if self._evidence_day is None:
            self._evidence_day = header_day(self.case.index.text(self.evidence) or "")
        return self._evidence_day

    def _from_evidence(self, unit: str) -> bool:
        """Whether the memory unit ``unit``, or one of its earlier versions, was written from the evidence."""
        index = self.case.index
        versions = index.versions(index.data(unit)["name"])
        upto = versions[:versions.index(unit) + 1] if unit in versions else [unit]
        return any(v in self.written_from for v in upto)

    def _states_gold_of_sentence(self, variable: str) -> bool:
        """Whether a statement of ``variable``, written from the evidence, holds the whole gold and
        restates the evidence sentence that says it rather than another sentence of the message.

        An extractor paraphrases ("I made this stained glass window to remind myself
        ..." -> "Caroline made a stained glass window ..."), and the question's words
        may single out another sentence saying the gold (the photo's caption "stained
        glass windows in a church"): little of that sentence survives, but the gold
        does, and the statement was written from this message. What tells it from a fact of the
        same message's other sentences (which holds the session date a date gold is)
        is which of the message's sentences it shares most words with, gold words
        left out; it must share one at least. A statement quoted word for word from
        another message is that message's.
        """
        index, info = self.case.index, self.info
        if not info.gold or not info.text:
            return False
        gold = frozenset(info.gold)
        said = [tokens for _, tokens in index.pieces(self.evidence)]
        # The sentence the fact was found in, and any other sentence of the message saying the whole gold
        # (a photo's caption and the sentence about it both name "a stained glass window").
        stating = [tokenize(info.text), *(tokens for tokens in said if gold <= tokens)]
        for text, tokens in index.pieces(variable):
            if (not gold | info.exact | self._unsaid <= tokens or not info.tells_event(tokens)
                    or index.quoted_message(text) - {self.evidence}
                    or not info.together(text)):
                continue

            def overlap(sentence: frozenset[str], tokens: frozenset[str] = tokens) -> float:
                return math.fsum(index.idf(t) for t in (sentence & tokens) - gold)

            own = max(overlap(sentence) for sentence in stating)
            if own > 0 and (info.whole or all(overlap(other) <= own for other in said)):
                return True
        return False

    def _restates_message(self, variable: str) -> bool:
        """Whether a statement of ``variable``, written from the evidence, restates part of it, when
        none of the gold's words are in the message (an abstractive gold: "Likely no", "Liberal").

        Then nothing says which of the message's sentences the answer needed (the one with
        the question's words may be a photo caption beside it), and the fact is what the
        message says; an extractor keeps it as third-person facts in its own words, each
        about one part of it. A statement written from the message that keeps the speaker
        asked about and some of the message's own words (:data:`_RESTATED_SHARE` of their
        IDF weight; its header's date and speaker, which every fact of the session holds, left
        out) is that extraction's result: the extraction stored the message, and a failed
        answer lost it later. A statement quoted word for word from another message is that
        message's.
        """
        return self.restates_message(variable, self.info.exact)

    def restates_message(self, variable: str, keep: frozenset[str]) -> bool:
        """Whether a statement of ``variable`` restates part of the evidence message (:data:`_RESTATED_SHARE`
        of its IDF weight, ``keep``'s tokens aside) and ``variable`` holds ``keep`` (the speaker asked
        about, say); a statement quoted word for word from another message is that message's."""
        index = self.case.index
        if not keep <= index.tokens(variable):
            return False
        said = {t: index.idf(t) for _, tokens in index.pieces(self.evidence) for t in tokens - keep}
        total = math.fsum(said.values())
        if not total:
            return False
        # A bracketed note beside what the speaker said (the caption an app writes for a shared photo, a
        # resolved time) is not the message's words: a fact restating the spoken part of a message with a
        # long caption restates a part of what was said, however small a share of the whole it is.
        if self._spoken is None:
            self._spoken = tokenize(_NOTES.sub(" ", index.text(self.evidence) or ""))
        spoken = {t: w for t, w in said.items() if t in self._spoken}
        spoken_total = math.fsum(spoken.values())
        # A statement of fewer than three words (a message cut to its first words, "Yeah totally It's
        # ...") says no fact of it, whatever share of the message's words that one word weighs.
        return any(len(tokens - keep) >= _PARAPHRASE_MIN_WORDS
                   and (weighted_share(said, tokens, total) >= _RESTATED_SHARE
                        or (spoken_total > 0
                            and weighted_share(spoken, tokens, spoken_total) >= _RESTATED_SHARE))
                   and not index.quoted_message(text) - {self.evidence}
                   for text, tokens in index.pieces(variable))

    def _paraphrases(self, variable: str) -> bool:
        """Whether a statement of ``variable`` says the evidence's fact in other words.

        Extractors write third-person facts, not the message's words, and golds
        are abstractive, so word shares miss real carriers: a statement whose
        embedding is close to the evidence sentence's (message -> fact paraphrase)
        carries it when it keeps the answer's exact tokens (numbers, the speaker
        asked about), the gold's names, numbers and months the message said, and at
        least half of the gold's words the evidence holds.
        A lossy or swapped fact (a number changed, the key detail dropped) stays
        close in meaning and is still not a carrier, and so is a statement quoted
        word for word from another message (a reply on the same topic).
        """
        index, info, embed = self.case.index, self.info, self.case.semantic
        assert embed is not None
        # Half the gold by how rare its words are in the conversation: a paraphrase close in meaning
        # that keeps only a name every other message has ("LGBTQ" of "visited an LGBTQ center") is
        # about the same subject, not the same fact.
        rare = {t: w * index.idf(t) for t, w in info.gold.items()}
        total = math.fsum(rare.values())
        # A paraphrase says the fact's words in other words, but not its names, numbers or months: a
        # statement without one the message said ("a small town" for "a small Midwestern town") is a
        # lossy fact, however close in meaning.
        named = self._named()
        pieces = [text for text, tokens in index.pieces(variable)
                  if len(tokens - info.exact) >= _PARAPHRASE_MIN_WORDS
                  and named <= tokens and info.tells_event(tokens)
                  and info.gold_in(tokens, threshold=_PARAPHRASE_GOLD_SHARE)
                  and (not rare or weighted_share(rare, tokens, total) >= _PARAPHRASE_GOLD_SHARE)
                  and not index.quoted_message(text) - {self.evidence}]
        if not pieces:
            return False
        vectors = embed([info.text, *pieces])
        return bool(max((vectors[1:] @ vectors[0]).tolist()) >= _PARAPHRASE_SIMILARITY)

    def _named(self) -> frozenset[str]:
        """The gold's names, numbers and months the evidence message said (:func:`.presence.salient`)."""
        if self._salient is None:
            self._salient = salient(self.info, self.case.index.message_text(self.evidence))
        return self._salient

    def _references_carrier(self, variable: str) -> bool:
        """Whether ``variable`` lists the id of a stored record that carries the information when it
        was written (a retrieval passing on ids and scores carries what those records say)."""
        return any(state != variable and self(state)
                   for state in self.case.index.referenced_states(variable, self.case.query_time))

    def forward(self) -> tuple[list[str], list[str]]:
        if self._forward is None:
            self._forward = _forward(self.case, self)
        return self._forward

    def lineage_stored(self) -> list[str]:
        """Stored carriers on the evidence's own lineage: reached forward from it, or memory units
        written from it (:attr:`written_from`) that carry it.

        An extractor's facts are not dated (a list of sentences); the unit a decision writes
        from them is (mem0 stamps the record with the message's time). A fact that keeps the
        message's relative time ("started lifting weights one year ago") says the date only
        once stored with that time: the extraction passed the information on, though its
        undated facts do not carry a date gold on their own.
        """
        index, when = self.case.index, self.case.query_time
        found = [v for v in self.forward()[0] if index.is_stored(v) and index.produced_at(v) < when]
        if not self.structural:
            seen = set(found)
            found.extend(sorted((v for v in self.written_from if v not in seen and index.is_stored(v)
                                 and 0 <= index.produced_at(v) < when and self(v)),
                                key=lambda v: (index.produced_at(v), v)))
        return found

    def stored(self) -> list[str]:
        """Memory variables (any version, written before the question) that carry the information.

        Searched store-wide, not only downstream of the evidence: a unit that
        came from another message saying the same thing (a deduplicated
        fact) counts too. Store-wide means the stores the question read
        (another user's memory cannot answer it), found through the index by
        the information's heaviest tokens and the exact ones every carrier holds.
        """
        if self._stored is None:
            self._stored = self._search_stored()
        return self._stored

    def _search_stored(self) -> list[str]:
        index, when = self.case.index, self.case.query_time
        if self.structural:
            pool: list[str] | set[str] = [v for v in self.forward()[0] if index.is_stored(v)]
        else:
            weights = self.info.gold or self.info.sentence
            keys = sorted(weights, key=lambda t: (-weights[t], t))[:_STORED_SEARCH_KEYS]
            pool = index.candidates(keys, required=self.info.exact, stores=self.case.stores)
        found = [v for v in pool if index.produced_at(v) < when and self(v)]
        return sorted(found, key=lambda v: (index.produced_at(v), v))

    @property
    def written_from(self) -> set[str]:
        """Variables written from the evidence itself: memory units and what write-side operations
        passed on to them (extracted facts; not their prompts or raw responses), reached from it
        through operations and the variables they pass on, not through another memory unit (an add
        that read an older memory as context did not write its new units from that message)."""
        if self._written_from is None:
            index, found = self.case.index, set()
            seen, stack = {self.evidence}, [self.evidence]
            while stack:
                for child in index.G._succ[stack.pop()]:
                    if child in seen:
                        continue
                    seen.add(child)
                    if index.G.nodes[child].get("type") == OPERATION:
                        stack.append(child)
                    elif index.is_stored(child):
                        found.add(child)
                    else:
                        producer = index.producer(child)
                        if (producer is not None and index.category(producer) in _WRITE_SIDE
                                and child in index.written(producer)):
                            found.add(child)
                        stack.append(child)
            self._written_from = found
        return self._written_from

    @property
    def descendants(self) -> set[str]:
        if self._descendants is None:
            self._descendants = nx.descendants(self.case.index.G, self.evidence)
        return self._descendants


def answer_history(index: GraphIndex, answer: str) -> set[str]:
    """Everything ``answer`` depends on: its ancestors, but not through a context's older version.

    A version edge ``v -> v+1`` says the two are one variable, which for memory
    is lineage (an update rewrites the unit). A retrieved context or a query
    is written whole by each operation: two searches that happen to write one
    name (one per speaker, same question) are not each other's input, and the
    other search must not enter the answer's history through the version edge.
    """
    G = index.G
    seen = {answer}
    stack = [answer]
    while stack:
        node = stack.pop()
        for parent, edge in G._pred[node].items():
            if parent in seen:
                continue
            if edge.get("role") == "version" and not index.is_stored(node):
                continue
            seen.add(parent)
            stack.append(parent)
    seen.discard(answer)
    return seen


def _with_question_reads(index: GraphIndex, generator: str, answer_slice: set[str]
                         ) -> tuple[set[str], set[str], set[str]]:
    """The answer's history with the question's own retrievals in it (and them), other questions' left out.

    The question ties a generation to its retrievals: a retrieval or rerank
    that read the very query the generation read is the question's, even when
    what it returned reaches the generation only by value (MemBase's traces
    link retrieved memories by content, so the answerer reads the copies the
    last search of a batch wrote). A read-side op on the slice that read only
    other questions' queries is not this question's.
    """
    asked = [v for v in index.inputs(generator) if index.data(v).get("kind") == VariableKind.QUERY]
    if not asked:
        return answer_slice, set(), set()
    texts = {index.content(v) for v in asked} - {None}
    when = index.order(generator)
    start = {op for v in asked for op in index.readers(v)
             if op != generator and index.category(op) in _READ_SIDE and index.order(op) < when}
    window = (min(index.order(op) for op in start), when) if start else None
    if window is not None:
        # The next search of another question bounds this one's steps: equal result lists are one
        # node (smartcomment), so a later question's steps read this one's results too.
        last = max(index.order(op) for op in start)
        window = (window[0], min([when, *(order for order, queries in index.query_reads() if order > last
                                          and not any(v in asked or index.content(v) in texts
                                                      for v in queries))]))
    own = _read_closure(index, start, window[1] if window else when)
    foreign = set()
    for op in answer_slice:
        if index.data(op).get("type") != OPERATION or index.category(op) not in _READ_SIDE or op in own:
            continue
        queries = _queries_behind(index, op)
        if queries:
            if not any(v in asked or index.content(v) in texts for v in queries):
                foreign.add(op)
        elif window is not None and not window[0] <= index.order(op) < window[1]:
            foreign.add(op)  # a later step of another question's search (it reads no query itself)
    if not own and not foreign:
        return answer_slice, own, foreign
    result = (answer_slice - foreign) | own
    for op in own:
        result.update(index.written(op))
    return result, own, foreign


def _read_closure(index: GraphIndex, start: set[str], before: int) -> set[str]:
    """``start`` and the read-side ops (before ``before``) that read what they wrote, not memory.

    A search in several steps reads the query only at its first ones: a final
    rerank reads the first retrieval's result list, and is the question's all the same.
    """
    found, stack = set(start), list(start)
    while stack:
        for variable in index.written(stack.pop()):
            if index.data(variable).get("kind") in STORED_KINDS:  # memory, not a result list
                continue
            for reader in index.readers(variable):
                if (reader not in found and index.category(reader) in _READ_SIDE
                        and index.order(reader) < before and not index.is_step(reader)):
                    found.add(reader)
                    stack.append(reader)
    return found


def _queries_behind(index: GraphIndex, op: str) -> list[str]:
    """The queries a read-side op read, itself or through the read-side ops whose results (not memory)
    it read: which question's search it is part of."""
    found: list[str] = []
    seen, stack = {op}, [op]
    while stack:
        inputs = index.inputs(stack.pop())
        direct = [v for v in inputs if index.data(v).get("kind") == VariableKind.QUERY]
        if direct:  # an op that reads a query is that question's, whatever else it read
            found.extend(direct)
            continue
        for variable in inputs:
            writer = None if index.data(variable).get("kind") in STORED_KINDS else index.producer(variable)
            if writer is not None and writer not in seen and index.category(writer) in _READ_SIDE:
                seen.add(writer)
                stack.append(writer)
    return found


def _query_time(index: GraphIndex, generator: str, operations: list[str]) -> int:
    """Execution order at which the question starts being answered (end of the write side).

    The question's read side is its retrievals, reranks and generation in the
    answer's own trace, and those the answer reaches back to through what
    they wrote (contexts, queries) without passing through memory: an app
    may run each search in a trace of its own.
    """
    trace = index.data(generator).get("trace_id")
    starts = [
        index.order(op)
        for op in operations
        if index.category(op) in _QUERY_SIDE
        and index.data(op).get("trace_id") == trace
    ]
    starts.extend(index.order(op) for op in _read_chain(index, generator))
    return min(starts, default=index.order(generator))


def _read_chain(index: GraphIndex, generator: str) -> list[str]:
    """Read-side ops whose outputs reach ``generator`` through variables that are not memory."""
    found, seen = [], {generator}
    stack = [generator]
    while stack:
        op = stack.pop()
        for variable in index.inputs(op):
            if index.is_stored(variable):
                continue
            writer = index.producer(variable)
            if writer is None or writer in seen or index.category(writer) not in _QUERY_SIDE:
                continue
            seen.add(writer)
            found.append(writer)
            stack.append(writer)
    return found


def _read_stores(index: GraphIndex, operations: list[str]) -> list[str] | None:
    """Stores the retrievals and reranks on the answer's slice read, sorted; ``None`` if they name none."""
    stores = (index.data(op).get("store_id") for op in operations if index.category(op) in _READ_SIDE)
    return sorted({s for s in stores if isinstance(s, str) and s}) or None


def truncated(index: GraphIndex, variable: str) -> bool:
    """Whether the captured content of ``variable`` was cut short (``MEMTRACE_CONTENT_MAX_CHARS``)."""
    return len(index.content(variable) or "") < int(index.data(variable).get("size") or 0)


def _forward(case: LineageCase, carries: Carrying) -> tuple[list[str], list[str]]:
    """Write-side walk from the evidence: carrying variables reached, and ops that dropped it.

    Only operations before the question count, and not the internal steps of
    one (model calls); an op that read a carrier and wrote no carrier, prompts
    and raw responses aside, is a drop.
    """
    index = case.index
    seen_vars, seen_ops = {carries.evidence}, set()
    queue = deque([carries.evidence])
    carriers, dropped, passed = [], [], set()
    while queue:
        variable = queue.popleft()
        carriers.append(variable)
        for op in index.readers(variable):
            if op in seen_ops or index.order(op) >= case.query_time or index.is_step(op):
                continue
            seen_ops.add(op)
            # What the op wrote, not its prompt or raw model response: an extraction whose
            # prompt holds the message but whose facts do not has dropped it.
            written = [v for v in index.written(op) if carries(v)]
            if written:
                passed.add(op)
            elif index.category(op) in _WRITE_SIDE:
                dropped.append((op, variable))
            for v in written:
                if v not in seen_vars:
                    seen_vars.add(v)
                    queue.append(v)
    # The information went around an op when a later op read the same carrier and passed it on
    # (a boundary detector that cut a memcell of the earlier messages, leaving this one in the
    # buffer the next update carries forward): that op dropped nothing.
    drops = [op for op, variable in dropped
             if not any(other in passed and index.order(other) > index.order(op)
                        for other in index.readers(variable))]
    return carriers, list(dict.fromkeys(drops))
