"""One text toolkit: word tokens, stop words, stemming, sentences, dates and numbers, token F1.

Two readers of chat text use it: the attribution engines (is a fact still
present in a memory? :mod:`memtrace_otel.attribution.presence`) and the
benchmark's reference systems (their offline reader, extractor and lexical
embedder, :mod:`memtrace_bench.systems`). They share every primitive
here; where they read text differently, the difference is a named constant or
keyword, never a second copy:

=========================  ===============================  ===================================
                           reference systems ("chat")        presence test ("facts")
=========================  ===============================  ===================================
word pattern               :data:`CHAT_WORD` ("i'm", "7th")  :data:`WORD_OR_NUMBER` ("7", "th")
stop words                 :data:`CHAT_STOPWORDS`            :data:`FACT_STOPWORDS`
:func:`stem`               ``min_stem=3, sibilant_es=True``  ``min_stem=4, sibilant_es=False``
numbers, months, ordinals  as written                        canonical (:func:`normalize_token`)
entry point                :func:`content_tokens`            :func:`fact_tokens`
=========================  ===============================  ===================================

The presence test reads with ``fold`` (:func:`fact_words`, :func:`normalize_token`): letters of any
script, accents folded, numbers to ninety-nine spelled out as digits, and a final "ie" or "y" folded
as stripping a plural folds it; the real-mem0 labeller and the reference systems tokenise without it.

:func:`readable` turns a stored record (a JSON memory, a message with a
``Timestamp:`` line) into the sentences it says, dated in words.

The settings are pinned: the reference systems' choices decide which
benchmark cases exist (``memtrace bench build`` must write the same labels for
the same seed), and the presence test's decide the attribution verdicts.
Both stop lists are one shared core (:data:`STOPWORDS`) plus the words each
tokenizer needs on top (contractions with or without their apostrophe).

Everything is deterministic and dependency-free; hot functions are memoised
process-wide (the benchmark tokenises the same messages thousands of times).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet

__all__ = [
    "ANY_WORD_OR_NUMBER",
    "CHAT_STOPWORDS",
    "CHAT_WORD",
    "FACT_STOPWORDS",
    "MONTHS",
    "MONTH_NAMES",
    "NUMBER_WORDS",
    "SENTENCE_END",
    "STOPWORDS",
    "WORD_OR_NUMBER",
    "bm25_idf",
    "content_tokens",
    "fact_token_sequence",
    "fact_tokens",
    "fact_words",
    "normalize_answer",
    "normalize_token",
    "readable",
    "sentences",
    "short_date",
    "spoken_day",
    "stem",
    "strip_ordinals",
    "token_f1",
    "words",
]

# -- tokens ------------------------------------------------------------------------------------

CHAT_WORD = re.compile(r"[A-Za-z0-9']+")
"""A chat word: letters, digits and apostrophes together (``i'm``, ``7th``, ``2023``)."""

WORD_OR_NUMBER = re.compile(r"[A-Za-z]+|\d+")
"""A run of letters or a run of digits (``7th`` -> ``7``, ``th``; ``i'm`` -> ``i``, ``m``)."""


def words(text: str, *, pattern: re.Pattern[str] = CHAT_WORD, lower: bool = True) -> list[str]:
    """Word tokens of ``text`` by ``pattern``, lower-cased unless ``lower=False``.

    Parameters
    ----------
    text : the text.
    pattern : :data:`CHAT_WORD` (default) or :data:`WORD_OR_NUMBER`.
    lower : lower-case the tokens (the presence test keeps case to spot names).

    >>> words("Hey Mel! I'm fine on the 7th.")
    ['hey', 'mel', "i'm", 'fine', 'on', 'the', '7th']
    >>> words("I'm Mel, 7th", pattern=WORD_OR_NUMBER, lower=False)
    ['I', 'm', 'Mel', '7', 'th']
    """
    found = pattern.findall(text)
    return [w.lower() for w in found] if lower else found


# -- stop words --------------------------------------------------------------------------------
# One string rather than a list literal: easier to read and to extend.

STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are at be been before being below between
both but by can could did do does doing don down during each few for from further get go going gonna
got had has have having he her here hers herself hey hi him himself his how i if in into is it it's
its itself just like lot me more most much my myself no nor not now of off oh on once one only or
other our ours ourselves out over own really s same she should so some such t than thank thanks that
the their theirs them themselves then there these they thing things this those through to too under
up very was we were what when where which who whom why will with would wow yeah yes you your yours
yourself
""".split()  # noqa: SIM905
)
"""The core both stop lists share: English function words and chat fillers."""

CHAT_STOPWORDS = STOPWORDS | frozenset(
    """
aren't can't cannot couldn't didn't doesn't don't good great hadn't hasn't haven't he'd he'll he's
here's how's i'd i'll i'm i've isn't know let's mustn't ought shan't she'd she'll she's shouldn't
that's there's they'd they'll they're they've think wasn't we'd we'll we're we've weren't what's
when's where's who's why's won't wouldn't you'd you'll you're you've
""".split()  # noqa: SIM905
)
"""Stop words for :data:`CHAT_WORD` tokens: contractions keep their apostrophe."""

FACT_STOPWORDS = STOPWORDS | frozenset(
    """
anything as because didn doesn im isn ive let lets something thats until wanna wasn went while youre
yourselves
""".split()  # noqa: SIM905
)
"""Stop words for :data:`WORD_OR_NUMBER` tokens: contractions as the pieces that pattern leaves."""


# -- stemming ----------------------------------------------------------------------------------

_SUFFIXES = ("ing", "ed", "es", "s")
_SIBILANT_ES = ("ses", "xes", "ches", "shes")


@functools.lru_cache(maxsize=65536)
def stem(word: str, *, min_stem: int = 3, sibilant_es: bool = True) -> str:
    """A crude suffix stripper (``-ing``, ``-ed``, ``-es``, ``-s``): enough to match "painting" with "paint".

    Parameters
    ----------
    word : a lower-case word.
    min_stem : the shortest stem a suffix may leave (3: "uses" -> "use"; 4 keeps "uses").
    sibilant_es : strip a whole ``-es`` only after a sibilant ("classes" -> "class") and
        just the ``-s`` otherwise ("likes" -> "like"); ``False`` strips ``-es`` always.

    >>> [stem(w) for w in ["painting", "paints", "painted", "classes", "changes", "uses", "is"]]
    ['paint', 'paint', 'paint', 'class', 'change', 'use', 'is']
    >>> [stem(w, min_stem=4, sibilant_es=False) for w in ["classes", "changes", "uses"]]
    ['class', 'chang', 'uses']
    """
    for suffix in _SUFFIXES:
        if len(word) >= len(suffix) + min_stem and word.endswith(suffix):
            if suffix == "es" and sibilant_es and not word.endswith(_SIBILANT_ES):
                return word[:-1]
            return word[: -len(suffix)]
    return word


# -- dates and numbers -------------------------------------------------------------------------

NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "first": "1", "second": "2", "third": "3", "once": "1", "twice": "2",
}
"""Number words (and ordinals, "once", "twice") by the digits they mean."""

MONTHS = {
    "jan": "january", "feb": "february", "mar": "march", "apr": "april", "jun": "june",
    "jul": "july", "aug": "august", "sep": "september", "sept": "september", "oct": "october",
    "nov": "november", "dec": "december",
}
"""Month abbreviations by full name ("may" has none)."""

MONTH_NAMES = frozenset(MONTHS.values()) | {"may"}

_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)\b", re.IGNORECASE)
_DATE = re.compile(r"(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})")
_LONG_NUMBER = 6  # digits from which a number is an id, kept verbatim (leading zeros matter)


def strip_ordinals(text: str) -> str:
    """``7th`` -> ``7``, ``1st`` -> ``1``.

    >>> strip_ordinals("the 7th and 21st of May")
    'the 7 and 21 of May'
    """
    return _ORDINAL.sub(r"\1", text)


@functools.lru_cache(maxsize=65536)
def normalize_token(word: str, *, min_stem: int = 4, sibilant_es: bool = False, fold: bool = False) -> str:
    """The canonical form of one token: digits without leading zeros, full month names,
    number words as digits, otherwise the :func:`stem` (the presence test's settings by default).

    ``fold`` also folds a word no suffix was stripped from the way stripping ``-es`` does to its
    plural: a final ``ie`` loses its ``e`` ("hoodie" meets "hoodies" -> "hoodi") and a final ``y``
    after a consonant becomes ``i`` ("story" meets "stories"). Without it the singular and the
    plural of such words are different tokens, and a gold word is missed in a fact stating it.

    >>> [normalize_token(w) for w in ["007", "Sept", "May", "two", "Painted"]]
    ['7', 'september', 'may', '2', 'paint']
    >>> [normalize_token(w, fold=True) for w in ["hoodie", "hoodies", "story", "stories", "play", "tree"]]
    ['hoodi', 'hoodi', 'stori', 'stori', 'play', 'tree']
    """
    lower = word.lower()
    if lower.isdigit():
        return str(int(lower)) if len(lower) < _LONG_NUMBER else lower
    lower = MONTHS.get(lower, lower)
    if lower in MONTH_NAMES:
        return lower
    if lower in NUMBER_WORDS:
        return NUMBER_WORDS[lower]
    stemmed = stem(lower, min_stem=min_stem, sibilant_es=sibilant_es)
    if fold and stemmed == lower and len(lower) > min_stem:
        if lower.endswith("ie"):
            return lower[:-1]
        if lower.endswith("y") and lower[-2] not in "aeiou":
            return lower[:-1] + "i"
    return stemmed


def spoken_day(date_text: str) -> str | None:
    """The day ``date_text`` names: ``1:56 pm on 8 May, 2023`` -> ``8 May 2023``; ``None`` without one.

    >>> spoken_day("1:56 pm on 8 May, 2023"), spoken_day("yesterday")
    ('8 May 2023', None)
    """
    match = _DATE.search(date_text)
    return None if match is None else f"{int(match.group(1))} {match.group(2)} {match.group(3)}"


def short_date(date_text: str) -> str:
    """``1:56 pm on 8 May, 2023`` -> ``8 May 2023`` (unchanged when it does not parse).

    >>> short_date("1:56 pm on 8 May, 2023")
    '8 May 2023'
    """
    return spoken_day(date_text) or date_text.strip()


# -- the two tokenizers ------------------------------------------------------------------------

def content_tokens(text: str) -> list[str]:
    """Chat content words: stemmed :data:`CHAT_WORD` tokens that are not :data:`CHAT_STOPWORDS`.

    What the reference systems match on (reader, extractor, lexical embedder, similarity).

    >>> content_tokens("What did Caroline research?")
    ['caroline', 'research']
    """
    return list(_content_tokens(text))


@functools.lru_cache(maxsize=65536)
def _content_tokens(text: str) -> tuple[str, ...]:
    return tuple(stem(w.strip("'")) for w in words(text)
                 if w not in CHAT_STOPWORDS and len(w.strip("'")) > 1)


def fact_tokens(text: str | None, *, fold: bool = False) -> frozenset[str]:
    """Fact tokens: :func:`normalize_token` of each :data:`WORD_OR_NUMBER` token, ordinals
    stripped, :data:`FACT_STOPWORDS` left out. What the presence test compares (with ``fold``).

    >>> sorted(fact_tokens("She painted two sunsets on the 3rd of Sept."))
    ['2', '3', 'paint', 'september', 'sunset']
    """
    return _fact_tokens(text, fold) if text else frozenset()


# Cases of one benchmark or span file share most contents (the ingestion is the same), so
# tokenising is memoised process-wide; this is what keeps an attribution within its time budget.
@functools.lru_cache(maxsize=200_000)
def _fact_tokens(text: str, fold: bool) -> frozenset[str]:
    return frozenset(_fact_token_list(text, fold))


def fact_token_sequence(text: str | None, *, fold: bool = False) -> tuple[str, ...]:
    """:func:`fact_tokens` in the order ``text`` says them, repeats kept: where words stand.

    >>> fact_token_sequence("She painted two sunsets, and painted a lake.")
    ('paint', '2', 'sunset', 'paint', 'lake')
    """
    return _fact_token_sequence(text, fold) if text else ()


@functools.lru_cache(maxsize=65536)
def _fact_token_sequence(text: str, fold: bool) -> tuple[str, ...]:
    return tuple(_fact_token_list(text, fold))


def _fact_token_list(text: str, fold: bool) -> list[str]:
    # One tokenisation for both memoised views (a set, and the order with repeats), each cached apart.
    return [normalize_token(w, fold=fold) for w in fact_words(text, fold=fold)
            if w.lower() not in FACT_STOPWORDS]


ANY_WORD_OR_NUMBER = re.compile(r"[^\W\d_]+|\d+")
""":data:`WORD_OR_NUMBER` in any script: a run of letters (``café``, ``Zoë``, ``Москва``) or of digits."""

_UNITS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_UNIT_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth")
_TEENS = ("thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SPELLED_VALUES = {
    **{w: 13 + i for i, w in enumerate(_TEENS)},
    **{w + "th": 13 + i for i, w in enumerate(_TEENS)},
    **{w: 20 + 10 * i for i, w in enumerate(_TENS)},
    **{w[:-1] + "ieth": 20 + 10 * i for i, w in enumerate(_TENS)},
    **{w: 1 + i for i, w in enumerate(_UNITS)},
    **{w: 1 + i for i, w in enumerate(_UNIT_ORDINALS)},
}
# Every spelled number starts with one of these letters: the lookahead lets the search skip every other
# word start at once instead of trying each alternative there (the same matches, about 4x faster on
# long texts; tokenising every memory of a conversation runs this over megabytes).
_SPELLED_INITIALS = "".join(sorted({w[0] for w in _TENS + _TEENS}))
_SPELLED_NUMBER = re.compile(
    rf"\b(?=[{_SPELLED_INITIALS}])(?:({'|'.join(_TENS)})(?:[- ]({'|'.join(_UNITS + _UNIT_ORDINALS)}))?"
    rf"|({'|'.join(_TEENS)})|((?:{'|'.join(w[:-1] for w in _TENS)})ieth|(?:{'|'.join(_TEENS)})th))\b",
    re.IGNORECASE)


def _spelled(match: re.Match[str]) -> str:
    tens, unit, single, ordinal = match.groups()
    if tens is None:
        return str(_SPELLED_VALUES[(single or ordinal).lower()])
    return str(_SPELLED_VALUES[tens.lower()] + (_SPELLED_VALUES[unit.lower()] if unit else 0))


@functools.lru_cache(maxsize=65536)
def fact_words(text: str, *, fold: bool = False) -> tuple[str, ...]:
    """The words the fact tokenizer normalises, as written (case kept), ordinals stripped.

    ``fold`` (the presence test's) reads text as people and memory systems write it beyond
    :data:`MONTHS` and :data:`NUMBER_WORDS`: accented letters as their base letter (an
    extractor may write "cafe" for "café", "Zoe" for "Zoë"), words in any script (not only
    ASCII letters), and numbers from thirteen to ninety-nine spelled out as their digits
    ("twenty-five" holds "25").

    >>> fact_words("Zoë's café, twenty-five years")
    ('Zo', 's', 'caf', 'twenty', 'five', 'years')
    >>> fact_words("Zoë's café, twenty-five years", fold=True)
    ('Zoe', 's', 'cafe', '25', 'years')
    """
    if fold:
        if not text.isascii():
            text = unicodedata.normalize("NFKD", text)
            # The combining marks among the text's distinct characters, dropped in one pass (a long memory
            # has hundreds of thousands of characters and a few distinct marks, if any).
            marks = [c for c in set(text) if unicodedata.combining(c)]
            text = text.translate(dict.fromkeys(map(ord, marks))) if marks else text
        return tuple(words(_SPELLED_NUMBER.sub(_spelled, strip_ordinals(text)), pattern=ANY_WORD_OR_NUMBER,
                           lower=False))
    return tuple(words(strip_ordinals(text), pattern=WORD_OR_NUMBER, lower=False))


# -- sentences ---------------------------------------------------------------------------------

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
"""Where a sentence ends: whitespace after ``.``, ``!`` or ``?``."""


def sentences(text: str, *, strip: bool = True) -> list[str]:
    """Split a chat message into its non-blank sentences.

    ``strip=False`` keeps each piece as cut (the outer whitespace of ``text``
    stays on the first and last piece), for callers that glue pieces back.

    >>> sentences("Hi! I went to a group yesterday. It was great")
    ['Hi!', 'I went to a group yesterday.', 'It was great']
    >>> sentences(" Hi!  Bye ", strip=False)
    [' Hi!', 'Bye ']
    """
    if strip:
        return [s.strip() for s in SENTENCE_END.split(text.strip()) if s.strip()]
    return [s for s in SENTENCE_END.split(text) if s.strip()]


# -- answers -----------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: lower case, no punctuation, no articles, single spaces.

    >>> normalize_answer("The  Sunday, before 25 May!")
    'sunday before 25 may'
    """
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def bm25_idf(terms: Iterable[str], documents: Sequence[AbstractSet[str]]) -> dict[str, float]:
    """BM25's IDF of each of ``terms`` over ``documents`` (sets of tokens): a term every document
    holds counts for little, a rare one for much.

    >>> {t: round(v, 2) for t, v in sorted(bm25_idf(["ann", "yoga"], [{"ann"}, {"ann", "yoga"}]).items())}
    {'ann': 0.18, 'yoga': 0.69}
    """
    count = len(documents)
    frequency = dict.fromkeys(terms, 0)
    for document in documents:
        for term in frequency.keys() & document:
            frequency[term] += 1
    return {t: math.log(1 + (count - df + 0.5) / (df + 0.5)) for t, df in frequency.items()}


def token_f1(prediction: str, gold: str, stem_word: Callable[[str], str] | None = None) -> float:
    """Token F1 of the normalised prediction against the normalised gold, each token passed through
    ``stem_word`` when given (LoCoMo's metric stems with Porter's stemmer: ``F1Judge``).

    >>> round(token_f1("8 May 2023", "7 May 2023"), 3)
    0.667
    >>> token_f1("adoption agency", "Adoption agencies"), token_f1("agency", "agencies", lambda w: w[:5])
    (0.5, 1.0)
    >>> token_f1("", "x")
    0.0
    """
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if stem_word is not None:
        pred, ref = [stem_word(w) for w in pred], [stem_word(w) for w in ref]
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


# -- records as text ------------------------------------------------------------------------------

_RECORD_TEXT_KEYS = ("content", "memory", "text", "data", "message", "fact")
_RECORD_TIME_KEYS = ("timestamp", "created_at", "date", "time")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})"
                       r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b")
_TIMESTAMP_LINE = re.compile(r"^\s*(?:timestamp|time|date)\s*:\s*(.+?)\s*$", re.IGNORECASE)
_MONTH_TITLES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
                 "October", "November", "December")


def _spoken_date(match: re.Match[str]) -> str:
    year, month, day = int(match.group(1)), int(match.group(2)), int(match.group(3))
    if not 1 <= month <= 12 or not 1 <= day <= 31:
        return match.group(0)
    return f"{day} {_MONTH_TITLES[month - 1]} {year}"


@functools.lru_cache(maxsize=200_000)
def readable(text: str, *, resolve: bool = True) -> str:
    """A stored record as the sentences it says: what a memory or message states, dated in words.

    Memory systems store records as JSON objects (mem0's and MemBase's
    ``{"memory": ..., "timestamp": ...}``, a message's ``{"content": ...}``):
    their text field is what they say, their time its date. ISO timestamps
    become dates as people (and gold answers) write them, and a line that only
    gives a time becomes the header of the line it dates, so the date stays
    with the statement (``[8 May 2023] ...``). A relative time a dated line
    says ("yesterday", "last week", "two years ago") is resolved against its
    date, in brackets after it ("last week [the week before 8 May 2023]"):
    golds state the resolved time (``resolve=False`` leaves them: the date is
    the header's, not something the line says). Anything else is returned as is.

    >>> readable('{"memory": "Ann adopted a dog", "timestamp": "2023-05-08T13:56:00"}')
    '[8 May 2023] Ann adopted a dog'
    >>> readable("Ann: I went hiking\\nTimestamp: 2023-05-08T13:56:00")
    '[8 May 2023] Ann: I went hiking'
    >>> readable("plain text")
    'plain text'
    """
    body, when = text, None
    stripped = text.strip()
    if stripped[:1] in "{[" and stripped[-1:] == ("}" if stripped[:1] == "{" else "]"):
        try:
            record = json.loads(stripped)
        except ValueError:
            record = None
        said = _record_text(record) if isinstance(record, dict) else None
        if said is not None:
            body = "\n".join(said)
            when = _record_time(record)
        elif isinstance(record, (dict, list)):
            # A record without a text field of its own (a buffer, a list of messages, a memory of
            # several parts: an episode, its atomic facts, the messages it came from): what its parts
            # say, each dated by the nearest time that encloses it.
            parts = _record_lines(record, None)
            if parts:
                return "\n".join(_dated(line) for line in parts) if resolve else "\n".join(parts)
    if "-" not in body and when is None and "[" not in body:
        return body
    lines: list[str] = []
    for line in body.splitlines():
        stamp = _TIMESTAMP_LINE.match(line)
        if stamp and lines and _ISO_DATE.search(stamp.group(1)):
            lines[-1] = f"[{_ISO_DATE.sub(_spoken_date, stamp.group(1))}] {lines[-1]}"
        else:
            lines.append(_ISO_DATE.sub(_spoken_date, line))
    if when is not None and _ISO_DATE.search(when):
        dated = f"[{_ISO_DATE.sub(_spoken_date, when)}] "
        lines = [line if line.startswith("[") else dated + line for line in lines]
    return "\n".join(_dated(line) for line in lines) if resolve else "\n".join(lines)


def _record_text(record: dict[str, object]) -> list[str] | None:
    """The text fields of a record (``memory``, ``content`` ...), or ``None`` when it has none."""
    said = [value for key in _RECORD_TEXT_KEYS if isinstance(value := record.get(key), str) and value]
    return said or None


def _record_time(record: dict[str, object]) -> str | None:
    return next((value for key in _RECORD_TIME_KEYS if isinstance(value := record.get(key), str)), None)


def _record_lines(value: object, when: str | None) -> list[str]:
    """The lines a JSON value says, in document order, each dated by the nearest enclosing time.

    A record with a text field says that field; one without says what its
    parts say: a list's every string, an object's strings that are prose (with
    a space: not ids or codes; time fields date, they do not speak), and the
    same of nested values.

    >>> _record_lines({"episode": "Ann met Bob.", "id": "e1", "timestamp": "2023-05-08",
    ...                "original_data": [{"content": "hi Bob", "timestamp": "2023-05-07"}]}, None)
    ['[8 May 2023] Ann met Bob.', '[7 May 2023] hi Bob']
    """
    if isinstance(value, list):
        return [line for item in value for line in _record_lines(item, when)]
    if isinstance(value, str):
        said_lines = readable(value, resolve=False).splitlines() if value.strip() else []
        stamp = _ISO_DATE.sub(_spoken_date, when) if when is not None and _ISO_DATE.search(when) else None
        return [line if stamp is None or line.startswith("[") else f"[{stamp}] {line}"
                for line in said_lines if line.strip()]
    if not isinstance(value, dict):
        return []
    when = _record_time(value) or when
    said = _record_text(value)
    if said is not None:
        return [line for text in said for line in _record_lines(text, when)]
    lines: list[str] = []
    for key, item in value.items():
        if key in _RECORD_TIME_KEYS or (isinstance(item, str) and " " not in item.strip()):
            continue
        lines.extend(_record_lines(item, when))
    return lines


_HEADER_DAY = re.compile(r"\s*\[(?:[^\]\[]{0,20}?\bon )?(\d{1,2}) ([A-Z][a-z]+),? (\d{4})\b[^\]]*\]")
"""A line's date header: ``[8 May 2023]``, or LoCoMo's ``[1:56 pm on 8 May, 2023]``."""
_WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# The lookahead holds the first character of every alternative below (a digit, or the initial of one of
# their words): word starts that begin none are skipped at once (the same matches, about 2x faster).
_RELATIVE = re.compile(
    r"\b(?=[\dafelnosty])(?:(yesterday|today|tonight|tomorrow)"
    r"|(last|next|this) (week|weekend|month|year|" + "|".join(_WEEKDAY_NAMES) + r")"
    r"|(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|few) (day|week|month|year)s? ago)\b",
    re.IGNORECASE)
_AMOUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10}


def _day_text(day: datetime.date) -> str:
    return f"{day.day} {_MONTH_TITLES[day.month - 1]} {day.year}"


def _shift_months(day: datetime.date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def _resolved(match: re.Match[str], said: datetime.date) -> str | None:
    """The time a relative expression said on ``said`` means, as a gold answer would state it."""
    one = datetime.timedelta(days=1)
    if match.group(1):
        offset = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}[match.group(1).lower()]
        return _day_text(said + offset * one)
    if match.group(2):
        direction, unit = match.group(2).lower(), match.group(3).lower()
        relation = {"last": "before", "next": "after", "this": "of"}[direction]
        if unit in ("week", "weekend") or unit in _WEEKDAY_NAMES:
            return f"the {unit} {relation} {_day_text(said)}"
        step = {"last": -1, "next": 1, "this": 0}[direction]
        if unit == "year":
            return str(said.year + step)
        year, month = _shift_months(said, step)
        return f"{_MONTH_TITLES[month - 1]} {year}"
    amount, unit = match.group(4).lower(), match.group(5).lower()
    if amount not in _AMOUNTS and not amount.isdigit():
        return f"{amount} {unit}s before {_day_text(said)}"
    n = int(amount) if amount.isdigit() else _AMOUNTS[amount]
    if unit == "day":
        return _day_text(said - n * one)
    if unit == "week":
        return f"{n} weeks before {_day_text(said)}"
    if unit == "year":
        return str(said.year - n)
    year, month = _shift_months(said, -n)
    return f"{_MONTH_TITLES[month - 1]} {year}"


def _dated(line: str) -> str:
    """``line`` with each relative time it says resolved against its date header, in brackets after it.

    >>> _dated("[8 May 2023] Ann: I went to the group yesterday and last week")
    '[8 May 2023] Ann: I went to the group yesterday [7 May 2023] and last week [the week before 8 May 2023]'
    """
    header = _HEADER_DAY.match(line)
    if header is None:
        return line
    month = _MONTH_TITLES.index(header.group(2)) + 1 if header.group(2) in _MONTH_TITLES else 0
    try:
        said = datetime.date(int(header.group(3)), month, int(header.group(1)))
    except ValueError:
        return line
    head, body = line[:header.end()], line[header.end():]

    def annotate(match: re.Match[str]) -> str:
        meaning = _resolved(match, said)
        return f"{match.group(0)} [{meaning}]" if meaning else match.group(0)

    return head + _RELATIVE.sub(annotate, body)
