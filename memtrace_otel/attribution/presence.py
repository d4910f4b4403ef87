"""Is the critical information still there? Token-level presence of an answer's key facts.

The lineage engine follows the evidence of a failed answer through the graph
and asks, for each variable on the way, whether it still carries what the
answer needed. "What the answer needed" is a weighted set of normalised
tokens (:class:`Information`): the gold answer's content words that the
evidence message holds (numbers, dates and names weigh more; numbers must
match exactly), together with the evidence sentence that states it, so that
a date every line of a session shares does not count as the fact itself.

>>> info = critical_information("7 May 2023", "When did Caroline go to the group?",
...                             "[8 May 2023] Caroline: I went to the group on 7 May 2023")
>>> sorted(info.gold)
['2023', '7', 'may']
>>> info.carried_by(tokenize("Caroline joined on 7 May 2023"))
True
>>> info.carried_by(tokenize("Caroline joined on 17 May 2023"))
False
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from memtrace_otel.text import (
    FACT_STOPWORDS,
    MONTH_NAMES,
    MONTHS,
    NUMBER_WORDS,
    fact_token_sequence,
    fact_tokens,
    fact_words,
    normalize_token,
    sentences,
)

__all__ = [
    "Information",
    "asks",
    "critical_information",
    "gold_window",
    "salient",
    "split_header",
    "split_lines",
    "tokenize",
    "topic_of",
    "weighted_share",
    "without_clock",
]

# Tokens that decide an answer on their own ("7 May", "3 kids", "Boston") and so must match exactly.
_SALIENT_WEIGHT = 2.0
_WORD_WEIGHT = 1.0
_CARRY_THRESHOLD = 0.8


def tokenize(text: str | None) -> frozenset[str]:
    """Normalised content tokens of ``text`` (lowercase, light stems, digits for number words).

    The toolkit's fact tokenizer (:func:`memtrace_otel.text.fact_tokens`), memoised there, folding
    words a suffix was not stripped from ("hoodie", "story") the way stripping one does, so a fact
    saying the singular holds a plural gold.

    >>> sorted(tokenize("She painted two sunsets in Sept."))
    ['2', 'paint', 'september', 'sunset']
    """
    return fact_tokens(text, fold=True)


def topic_of(question: str | None) -> frozenset[str]:
    """What ``question`` asks about: its content tokens beyond its names, numbers and months (whom and when
    it asks about are not what).

    >>> sorted(topic_of("What does Melanie do to keep herself busy during her pottery break?"))
    ['break', 'busy', 'keep', 'potteri']
    """
    return tokenize(question) - _salient(question or "")


def _salient(text: str) -> set[str]:
    """Numbers, month names and capitalised words (names) of ``text``, normalised."""
    found = set()
    for word in fact_words(text, fold=True):
        lower = word.lower()
        if lower in FACT_STOPWORDS:
            continue
        if word.isdigit() or word[0].isupper() or lower in NUMBER_WORDS or lower in MONTHS:
            found.add(normalize_token(word, fold=True))
    return found


_LONG_LINE = 400
# A chat line's header: "[8 May 2023] Caroline: ", "[10:02] ", "Caroline: " (a capitalised name of
# at most three words directly followed by a colon), "Speaker Caroline (role: user) says: " (a transcript
# line naming who speaks, as MemBase's buffers write each message).
_SPEAKS = r"[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,2}(?::| \([^)\n]{1,30}\) says:)\s+"
_HEADER = re.compile(rf"\s*(?:\[[^\]\n]{{1,60}}\]\s*(?:{_SPEAKS})?|{_SPEAKS})")
_SENTENCE_SHARE = 0.5
_SPECIFIC_SENTENCE_SHARE = 0.3
_TOPIC_SHARE = 0.5
_GOLD_WORD_SHARE = 0.5
_RELATED_SHARE = 0.3
_WHOLE_TOPIC_WORDS = 2  # a topic of one word (the speaker's name) does not single a fact out
_SPEAKER = re.compile(r"\[[^\]]*\]")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]\.?m\b\.?)?", re.IGNORECASE)
# Common gold words identify a fact only said together: a line may spread them over this many more
# words than the evidence sentence does ("a few times a week" against "last week ... a tough time").
_SPREAD_SLACK = 1


def split_lines(text: str | None) -> list[str]:
    """Lines of ``text``; long lines (paragraphs) are cut into sentences.

    A sentence cut from a chat line keeps the line's header (timestamp,
    speaker): the date a "when" question asks for belongs to every sentence
    of the message, not only to the first.

    >>> split_lines("one line. Two sentences.")
    ['one line. Two sentences.']
    """
    if not text:
        return []
    lines: list[str] = []
    for line in text.splitlines():
        if len(line) > _LONG_LINE:
            header, body = split_header(line)
            lines.extend(header + p for p in sentences(body, strip=False))
        elif line.strip():
            lines.append(line)
    return lines


def split_header(line: str) -> tuple[str, str]:
    """``(header, body)`` of a chat line: a bracketed timestamp and/or a ``Speaker:`` prefix.

    >>> split_header("[8 May 2023] Caroline: I went to the group. It was great.")
    ('[8 May 2023] Caroline: ', 'I went to the group. It was great.')
    >>> split_header("No header here.")
    ('', 'No header here.')
    """
    match = _HEADER.match(line)
    end = match.end() if match else 0
    return line[:end], line[end:]


def weighted_share(weights: dict[str, float], tokens: frozenset[str], total: float | None = None) -> float:
    """The share of ``weights`` (token -> IDF weight) that ``tokens`` hold; ``total`` is their sum when
    the caller keeps it (an :class:`Information`'s totals are summed once)."""
    if total is None:
        total = math.fsum(weights.values())
    # fsum: exact, so a share that sits on a threshold does not depend on the (hash-seeded) order
    # in which a set's weights are added, nor on which side is iterated; iterating the smaller side
    # matters, since this runs for every line of every text the walk tests.
    if not total:
        return 0.0
    if len(tokens) < len(weights):
        return math.fsum(weights[t] for t in tokens if t in weights) / total
    return math.fsum(w for t, w in weights.items() if t in tokens) / total


@dataclass(slots=True, frozen=True)
class Information:
    """One piece of critical information: the gold part and the sentence that states it.

    ``gold`` weighs the gold answer's tokens the evidence holds (``exact``
    ones, numbers, must all be present); ``sentence`` weighs the tokens of the
    evidence sentence that states it (IDF weights, so a date prefix or a
    speaker name every line shares counts little), and ``topic`` the part of
    that sentence the question asks about (what a reader finds it by). A
    text carries the information when it has the gold part and a line close
    to the sentence that keeps the topic;
    a ``specific`` gold part (rare in the conversation) needs less of the
    sentence, so a paraphrasing extractor still counts as carrying it.
    """

    gold: dict[str, float] = field(default_factory=dict)
    exact: frozenset[str] = frozenset()
    sentence: dict[str, float] = field(default_factory=dict)
    topic: dict[str, float] = field(default_factory=dict)
    specific: bool = False
    source: str = "gold"
    text: str = ""
    """The evidence sentence stating the fact, without its header: what a paraphrase is compared with."""
    whole: bool = False
    """The fact is the whole message (no sentence singled out): a text may hold it across its lines."""
    said: frozenset[str] = frozenset()
    """The gold's tokens anywhere in the evidence message (``gold`` keeps those of its sentence)."""
    asked: frozenset[str] = frozenset()
    """The question's tokens (who and what it asks about)."""
    headed: frozenset[str] = frozenset()
    """The topic's words only the sentence's header says (who sent it, the day): every sentence of the
    message and every other message of that speaker and day shares them."""
    event: frozenset[str] = frozenset()
    """For a date gold, the words the question asks its event by that the sentence says and memory lost
    (:func:`.survival.untold_event`, set by the caller): a line keeping the date keeps the event's date
    only with them. Empty otherwise."""
    spread: int = 0
    """When every gold word is common in the conversation (none identifies a fact alone), the longest
    run of words a line may hold them in (:func:`gold_window`); 0: anywhere in the line."""
    # Totals of the weights, summed once: the presence test asks for shares millions of times.
    gold_total: float = field(init=False, repr=False, compare=False, default=0.0)
    sentence_total: float = field(init=False, repr=False, compare=False, default=0.0)
    topic_total: float = field(init=False, repr=False, compare=False, default=0.0)

    def __post_init__(self) -> None:
        for name in ("gold", "sentence", "topic"):
            object.__setattr__(self, f"{name}_total", math.fsum(getattr(self, name).values()))

    def __bool__(self) -> bool:
        return bool(self.gold or self.sentence)

    @property
    def weights(self) -> dict[str, float]:
        return self.gold or self.sentence

    def tells_event(self, tokens: frozenset[str]) -> bool:
        """Whether a line with ``tokens`` says the event a date gold is of (:attr:`event`), as the question
        asks it ("hurt" of "When did Melanie get hurt?"); always, for another gold.

        >>> Information(gold={"september": 2.0}, event=frozenset({"hurt"})).tells_event(
        ...     tokenize("Melanie had a setback due to an injury (September 2023)"))
        False
        """
        return self.event <= tokens

    def together(self, text: str) -> bool:
        """Whether ``text`` says the gold's words together, as the evidence does, when they are common
        words (:attr:`spread`; a date's numbers and months aside); always, when they are not.

        Words every other message uses ("time", "week", "year") carry a fact only as the phrase
        they form: "we go a few times a week" is not held by "passed away last week ... a
        tough time". A rare word identifies the fact wherever it stands.
        """
        if not self.spread:
            return True
        window = gold_window(fact_token_sequence(text, fold=True), _worded(self.gold))
        return window is not None and window <= self.spread

    def coverage(self, tokens: frozenset[str]) -> float:
        """Weighted share of the gold part (the sentence part without gold) in ``tokens``."""
        return weighted_share(self.gold, tokens, self.gold_total) if self.gold else \
            weighted_share(self.sentence, tokens, self.sentence_total)

    def gold_in(self, tokens: frozenset[str], *, threshold: float = _CARRY_THRESHOLD) -> bool:
        if not self.exact <= tokens:
            return False
        return not self.gold or weighted_share(self.gold, tokens, self.gold_total) >= threshold

    def identified_by(self, tokens: frozenset[str]) -> bool:
        """Whether a line with ``tokens`` holds the whole gold and enough to tell which fact it answers,
        though little of the evidence sentence's other words: all of a rare (``specific``) gold and
        some of its sentence, or everything the question asks by (two words at least)."""
        if not self.gold or not self.gold.keys() | self.exact <= tokens or not self.tells_event(tokens):
            return False
        if (self.specific
                and weighted_share(self.sentence, tokens, self.sentence_total) >= _SPECIFIC_SENTENCE_SHARE):
            return True
        # A topic the header says alone (the speaker and the day the question names) is every fact's of
        # that day: the sentence's own words must say some of what the question asks by.
        return (len(self.topic) >= _WHOLE_TOPIC_WORDS and self.topic.keys() <= tokens
                and not self.topic.keys() <= self.headed)

    def answers(self, tokens: frozenset[str]) -> bool:
        """Whether a line with ``tokens`` answers the question as the evidence sentence does: it holds
        the whole gold, the exact tokens, and every word of the question the sentence holds (the
        topic: what a reader finds the fact by, the speaker asked about at least), whatever else
        it says.

        A memory that says "Melanie loves painting landscapes" answers "What does Melanie
        like to do?" (gold "painting") as well as the turn that said it, though it shares
        little of that turn's other words. It must hold all of the gold the message says, not
        only its sentence's part ("stories" of "the resilience of the veterans and their
        inspiring stories" is another fact's word). A date gold is left out: every fact of a
        session holds the session's date.
        """
        if not self.gold or not self.topic or all(t.isdigit() or t in MONTH_NAMES for t in self.gold):
            return False
        return (self.gold.keys() <= tokens and self.exact <= tokens and self.topic.keys() <= tokens
                and self.said <= tokens)

    def related(self, tokens: frozenset[str]) -> bool:
        """Whether a line with ``tokens`` is about this fact: much of its sentence (or gold) without
        asking that it keep the answer."""
        if self.sentence:
            return weighted_share(self.sentence, tokens, self.sentence_total) >= _RELATED_SHARE
        return bool(self.gold) and weighted_share(self.gold, tokens, self.gold_total) >= _RELATED_SHARE

    def carried_by(self, tokens: frozenset[str], *, threshold: float = _CARRY_THRESHOLD) -> bool:
        """Whether one text (as one line) with ``tokens`` carries this information."""
        return self.carried_by_lines(tokens, [tokens], threshold=threshold)

    def carried_by_lines(
        self,
        tokens: frozenset[str],
        lines: Iterable[frozenset[str]],
        *,
        threshold: float = _CARRY_THRESHOLD,
        memo: dict[frozenset[str], bool] | None = None,
    ) -> bool:
        """Whether a text with (all) ``tokens`` and these ``lines`` carries this information.

        ``memo`` keeps each line's verdict (:meth:`states`) across calls with the same
        ``threshold``: the versions of a window of raw messages share most of their lines.
        """
        if not self or not self.gold_in(tokens, threshold=threshold):
            return False
        if not self.sentence:
            return True
        if self.whole:
            lines = [*lines, tokens]
        if memo is None:
            return any(self.states(line, threshold=threshold) for line in lines)
        for line in lines:
            found = memo.get(line)
            if found is None:
                found = memo[line] = self.states(line, threshold=threshold)
            if found:
                return True
        return False

    def states(self, line: frozenset[str], *, threshold: float = _CARRY_THRESHOLD) -> bool:
        """Whether the line with tokens ``line`` states the fact (:meth:`carried_by_lines` asks it of
        each line, once the whole text holds the gold)."""
        # The gold must sit in the line that states the fact: a unit holding "guitar" in one
        # line and a similar sentence about drums in another does not carry "played guitar".
        if self.topic and weighted_share(self.topic, line, self.topic_total) < _TOPIC_SHARE:
            return False
        if not self.gold_in(line, threshold=threshold) or not self.tells_event(line):
            return False
        share = weighted_share(self.sentence, line, self.sentence_total)
        if share >= _SENTENCE_SHARE:
            return True
        # A rare gold identifies the fact with less of its sentence, but only all of it does.
        return self.specific and share >= _SPECIFIC_SENTENCE_SHARE and self.gold.keys() <= line


def critical_information(
    gold: str | None,
    question: str | None,
    evidence: str | None = None,
    *,
    idf: Callable[[str], float] | None = None,
    specific: Callable[[Iterable[str]], bool] | None = None,
    speaker: str | None = None,
) -> Information:
    """What a correct answer needed, located in ``evidence`` when it is given.

    The gold part is the gold's content tokens not already in the question
    (restricted to those the evidence holds); the sentence part is the
    evidence sentence that best holds the gold and matches the question.
    ``idf`` weighs sentence tokens; ``specific`` says whether gold tokens are
    rare enough to identify the fact alone; ``speaker`` (who said the
    message) tells a line that only names them from one that states something.
    """
    asked = tokenize(question)
    gold_info = _gold_information(gold, asked)
    if evidence is None:
        return gold_info
    held = tokenize(without_clock(evidence))
    gold_part = {t: w for t, w in gold_info.gold.items() if t in held}
    said = frozenset(gold_part)
    weigh = idf or (lambda _t: 1.0)
    line = _critical_sentence(evidence, gold_part, asked, weigh, tokenize(speaker))
    whole = line == evidence and len(split_lines(evidence)) + len(sentences(evidence)) > 2
    stated = tokenize(line)
    sentence = {t: weigh(t) for t in stated}
    # The fact is what its sentence states: gold words elsewhere in the message (a "video game"
    # two sentences on) are not part of it, and a unit need not hold them to carry it.
    gold_part = {t: w for t, w in gold_part.items() if t in stated} or gold_part
    # Who said it is part of the fact when the question asks about that person: the same words
    # from another speaker do not answer "What does John like?".
    speaker_named = tokenize(_SPEAKER.sub("", split_header(line)[0])) & asked
    spread = 0
    worded = _worded(gold_part)
    if len(worded) > 1 and specific is not None and not any(specific([t]) for t in worded):
        said_in = gold_window(fact_token_sequence(line, fold=True), worded)
        spread = said_in + _SPREAD_SLACK if said_in is not None else 0
    header, body = split_header(line)
    topic = {t: w for t, w in sentence.items() if t in asked}
    return Information(
        gold=gold_part,
        exact=(gold_info.exact & frozenset(gold_part)) | speaker_named,
        sentence=sentence,
        topic=topic,
        headed=frozenset(topic) & (tokenize(header) - tokenize(body)),
        specific=bool(gold_part) and (specific(gold_part) if specific else True),
        source="gold" if gold_part else "evidence",
        text=body.strip(),
        whole=whole,
        said=said,
        spread=spread,
        asked=asked,
    )


def without_clock(text: str) -> str:
    """``text`` without the clock time of its lines' headers (``[3:09 pm on 8 October, 2023]``).

    A header's hour and minute say when the line was sent, not what its speaker said: a gold
    "every three months" is not in a message sent at 3:09 pm. The header's day stays (a date
    gold is often the day a message said "today").

    >>> without_clock("[3:09 pm on 8 October, 2023] Sam: I went for a check-up at 3:30.")
    '[ on 8 October, 2023] Sam: I went for a check-up at 3:30.'
    """
    lines = []
    for line in text.splitlines(keepends=True):
        header, body = split_header(line)
        lines.append(_CLOCK.sub("", header) + body)
    return "".join(lines)


def _worded(tokens: Iterable[str]) -> list[str]:
    """The words of ``tokens``, sorted: not numbers or month names (a date's parts may come from a
    record's timestamp, a line's header, far from the words of its fact)."""
    return sorted(t for t in tokens if not t.isdigit() and t not in MONTH_NAMES)


def gold_window(sequence: tuple[str, ...], gold: Iterable[str]) -> int | None:
    """Length of the shortest run of ``sequence`` holding every token of ``gold``; ``None`` if one is missing.

    >>> gold_window(("pass", "away", "last", "week", "tough", "time"), ["week", "time"])
    3
    >>> gold_window(("go", "time", "week"), ["week", "time"]), gold_window(("time",), ["week"])
    (2, None)
    """
    wanted = set(gold)
    if not wanted:
        return 0
    counts: dict[str, int] = {}
    best: int | None = None
    start = 0
    for end, token in enumerate(sequence):
        if token not in wanted:
            continue
        counts[token] = counts.get(token, 0) + 1
        while len(counts) == len(wanted):
            first = sequence[start]
            if first in counts:
                size = end - start + 1
                best = size if best is None or size < best else best
                counts[first] -= 1
                if not counts[first]:
                    del counts[first]
            start += 1
    return best


def _critical_sentence(
    evidence: str, gold: dict[str, float], asked: frozenset[str], weigh: Callable[[str], float],
    speaker: frozenset[str] = frozenset(),
) -> str:
    """The evidence sentence that states the fact: one holding the gold the question points at.

    A reader finds a fact by the question's words, so among the sentences
    that hold part of the gold, the one with most of the question's rare
    words wins; the gold's own rare words count half (a message may say the
    answer twice, once about something else). IDF weighting matters: the
    question's rare words ("conference", "museum") single out the sentence.
    A message's header (timestamp, speaker) belongs to all its sentences, so
    sentences are scored without it and returned with it. When no sentence holds
    a gold or question word, the whole message is the fact.

    A line that says only who is speaking (a message's metadata block, ``Speaker
    Name: John``, which a memory system appends to what was said) states no
    fact: it would win on the speaker's name a question asks by, and every
    memory naming that person would then carry the "fact".
    """
    pieces: list[tuple[str, str]] = []
    for line in evidence.splitlines():
        header, body = split_header(line)
        pieces.extend((header, s) for s in sentences(body, strip=False)
                      if not (speaker and tokenize(s) and tokenize(s) <= speaker))
    if len(pieces) <= 1:
        return evidence
    holding = [item for item in pieces if tokenize("".join(item)) & gold.keys()]
    if any(tokenize(sentence) & gold.keys() for _, sentence in holding):
        # A sentence that asks, and holds the gold only by its header's day, states no fact however many of
        # the question's words it shares ("By the way, have you been to Universal Studios?"): the sentence
        # saying the gold in its own words does ("Planning a trip there next month [September 2023]."). One
        # that asks in the gold's words is the fact asked about ("Can we still talk about time management?").
        holding = [item for item in holding if not asks(item[1]) or tokenize(item[1]) & gold.keys()]

    def score(item: tuple[str, str]) -> float:
        tokens = tokenize(item[1])
        return sum(weigh(t) * (1.0 if t in asked else _GOLD_WORD_SHARE) for t in tokens
                   if t in asked or t in gold)

    best = max(holding or pieces, key=score)
    if not score(best) and not any(tokenize(sentence) & gold.keys() for _, sentence in holding):
        # No sentence holds a gold word or a question word (an abstractive gold, a paraphrased
        # question; a gold only the header says, the day a date gold is): nothing singles one out,
        # and the fact is what the whole message says.
        return evidence
    header, sentence = best
    return header + sentence


def asks(sentence: str) -> bool:
    """Whether ``sentence`` asks rather than states (it ends with a question mark).

    >>> asks("Why did you start painting years ago anyway?"), asks("I paint.")
    (True, False)
    """
    return sentence.rstrip().rstrip("\"')]").endswith("?")


def _gold_information(gold: str | None, asked: frozenset[str]) -> Information:
    if not gold:
        return Information(source="none")
    names = _salient(gold)
    weights = {
        t: (_SALIENT_WEIGHT if t in names else _WORD_WEIGHT)
        for t in tokenize(gold)
        if t not in asked
    }
    exact = frozenset(t for t in weights if t.isdigit())
    return Information(gold=weights, exact=exact, source="gold", specific=bool(weights))


def salient(info: Information, message: str | None = None) -> frozenset[str]:
    """The gold's names, numbers and months the evidence said: the tokens
    :func:`.presence.critical_information` weighs above a plain word's 1.

    A gold's first word is capitalised as any sentence's is ("Raise money for a dog
    shelter", "Winning a championship"): with the evidence ``message``, a word is a name
    only if the message capitalises it where a sentence does not start ("to raise money"
    and "Winning a championship is my goal." name nothing); numbers and months stay.

    >>> info = Information(gold={"raise": 2.0, "money": 1.0, "max": 2.0, "2022": 2.0})
    >>> sorted(salient(info)), sorted(salient(info, "We raise money for Max since 2022."))
    (['2022', 'max', 'raise'], ['2022', 'max'])
    >>> sorted(salient(info, "Raise money? Max said so in 2022."))
    ['2022']
    """
    found = frozenset(t for t, w in info.gold.items() if w > _WORD_WEIGHT)
    if not message or not found:
        return found
    named = frozenset().union(*(tokenize(m.group(1)) for m in _INNER_CAPITAL.finditer(message)))
    return frozenset(t for t in found if t.isdigit() or t in MONTH_NAMES or t in named)


_INNER_CAPITAL = re.compile(r"(?<![.!?\n])(?<![.!?]\s)(?<![.!?]\s\s)(?<=\s)([A-Z][\w'-]*)")
"""A capitalised word inside a sentence (after a space that follows no sentence end): a name."""
