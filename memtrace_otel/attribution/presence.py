"""Is the critical information still there? Token-level presence of an answer's key facts.

The lineage engine follows the evidence of a failed answer through the graph
and asks, for each variable on the way, whether it still carries what the
answer needed. "What the answer needed" is a weighted set of normalised
tokens (:class:`Information`): the gold answer's content words that the
evidence message holds (numbers, dates and names weigh more and must match
exactly), or, when there is no gold or the gold is not literally in the
evidence, the evidence message's own content words.

>>> info = critical_information("7 May 2023", "When did Caroline go to the group?",
...                             "[8 May 2023] Caroline: I went to the group on 7 May 2023")
>>> sorted(info.weights)
['2023', '7', 'may']
>>> info.carried_by(tokenize("Caroline joined on 7 May 2023"))
True
>>> info.carried_by(tokenize("Caroline joined on 17 May 2023"))
False
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "STOPWORDS",
    "Information",
    "critical_information",
    "signature_information",
    "tokenize",
]

_WORD = re.compile(r"[A-Za-z]+|\d+")
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)\b", re.IGNORECASE)

# One string rather than a list literal: easier to read and to extend.
STOPWORDS = frozenset(
    """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
also get got go going went like really yes yeah oh wow hey hi thanks thank much one s t don
didn doesn isn wasn im ive youre thats its it's let lets gonna wanna lot things thing
something anything
""".split()  # noqa: SIM905
)

_NUMBER_WORDS = {
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "first": "1",
    "second": "2",
    "third": "3",
    "once": "1",
    "twice": "2",
}
_MONTHS = {
    "jan": "january",
    "feb": "february",
    "mar": "march",
    "apr": "april",
    "jun": "june",
    "jul": "july",
    "aug": "august",
    "sep": "september",
    "sept": "september",
    "oct": "october",
    "nov": "november",
    "dec": "december",
}
_MONTH_NAMES = frozenset(_MONTHS.values()) | {"may"}
# Tokens that decide an answer on their own ("7 May", "3 kids", "Boston") and so must match exactly.
_SALIENT_WEIGHT = 2.0
_WORD_WEIGHT = 1.0
_CARRY_THRESHOLD = 0.6


def _stem(word: str) -> str:
    # A light suffix stripper: enough to match "paints"/"painting"/"painted", cheap and stable.
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _normal(word: str) -> str:
    lower = word.lower()
    if lower.isdigit():
        return str(int(lower)) if len(lower) < 6 else lower
    lower = _MONTHS.get(lower, lower)
    if lower in _MONTH_NAMES:
        return lower
    return _NUMBER_WORDS.get(lower) or _stem(lower)


def tokenize(text: str | None) -> frozenset[str]:
    """Normalised content tokens of ``text`` (lowercase, light stems, digits for number words).

    >>> sorted(tokenize("She painted two sunsets in Sept."))
    ['2', 'paint', 'september', 'sunset']
    """
    if not text:
        return frozenset()
    text = _ORDINAL.sub(r"\1", text)
    return frozenset(_normal(w) for w in _WORD.findall(text) if w.lower() not in STOPWORDS)


def _salient(text: str) -> set[str]:
    """Numbers, month names and capitalised words (names) of ``text``, normalised."""
    text = _ORDINAL.sub(r"\1", text)
    found = set()
    for word in _WORD.findall(text):
        lower = word.lower()
        if lower in STOPWORDS:
            continue
        if word.isdigit() or word[0].isupper() or lower in _NUMBER_WORDS or lower in _MONTHS:
            found.add(_normal(word))
    return found


@dataclass(slots=True, frozen=True)
class Information:
    """A weighted token set standing for one piece of critical information.

    ``exact`` tokens (numbers, dates) must all be present for a text to carry it.
    """

    weights: dict[str, float] = field(default_factory=dict)
    exact: frozenset[str] = frozenset()
    source: str = "gold"

    def __bool__(self) -> bool:
        return bool(self.weights)

    def coverage(self, tokens: Iterable[str]) -> float:
        """Weighted share of the information present in ``tokens`` (0 when it is empty)."""
        total = sum(self.weights.values())
        if not total:
            return 0.0
        have = tokens if isinstance(tokens, (set, frozenset)) else set(tokens)
        return sum(w for t, w in self.weights.items() if t in have) / total

    def carried_by(self, tokens: frozenset[str], *, threshold: float = _CARRY_THRESHOLD) -> bool:
        """Whether a text with ``tokens`` still carries this information."""
        if not self.weights or not self.exact <= tokens:
            return False
        return self.coverage(tokens) >= threshold

    def restricted_to(self, tokens: frozenset[str]) -> Information:
        """The part of this information that ``tokens`` (an evidence message) holds."""
        kept = {t: w for t, w in self.weights.items() if t in tokens}
        return Information(kept, self.exact & frozenset(kept), self.source)


def critical_information(
    gold: str | None, question: str | None, evidence: str | None = None
) -> Information:
    """What a correct answer needed: the gold's content tokens not already in the question.

    With ``evidence`` given, the gold tokens it holds; if it holds none (or there
    is no gold), the evidence's own content tokens instead.
    """
    asked = tokenize(question)
    gold_info = _gold_information(gold, asked)
    if evidence is None:
        return gold_info
    evidence_tokens = tokenize(evidence)
    restricted = gold_info.restricted_to(evidence_tokens)
    if restricted:
        return restricted
    return signature_information(evidence, asked)


def _gold_information(gold: str | None, asked: frozenset[str]) -> Information:
    if not gold:
        return Information(source="none")
    salient = _salient(gold)
    weights = {
        t: (_SALIENT_WEIGHT if t in salient else _WORD_WEIGHT)
        for t in tokenize(gold)
        if t not in asked
    }
    exact = frozenset(t for t in weights if t.isdigit())
    return Information(weights, exact, "gold")


def signature_information(text: str | None, asked: frozenset[str] = frozenset()) -> Information:
    """The content tokens of ``text`` as information (used when no gold locates the fact).

    >>> info = signature_information("Melanie painted a lake sunrise", tokenize("What did Mel paint?"))
    >>> sorted(info.weights)
    ['lake', 'melanie', 'sunrise']
    """
    tokens = tokenize(text)
    salient = _salient(text or "")
    weights = {
        t: (_SALIENT_WEIGHT if t in salient else _WORD_WEIGHT) for t in tokens if t not in asked
    }
    return Information(weights, frozenset(), "evidence")
