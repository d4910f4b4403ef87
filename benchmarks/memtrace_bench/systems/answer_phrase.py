"""Reading a question and a chat sentence: their words, what the question asks for, and the short answer.

The half of the offline reader (:mod:`~memtrace_bench.systems.reader`) that knows English
rather than the context: a sentence's words with their roles (chatter, light verbs, dates,
content), a question's kind ("how many", "who", a list ...) and the noun it asks about, and the
few words of a chosen sentence that answer it. The answer is the words nearest to the
question's words that the question does not already say (chatter, dates and the speakers'
names left out; a sentence that only sets the scene lends the next one's words): a number and
its noun for "how many" (an ordinal read as the count so far: "my fourth win" - "four"), a quoted
title or a name for "which"/"who"/"what book", else for "who" the speaker's relative ("my aunt" -
"Ann's aunt") and for "where" the words a preposition of place opens; for "why" the clause a word
of cause opens ("because ..."); and for list questions ("what activities ...") one short phrase
from each of the best few messages, or, where a message enumerates things ("sit, stay, paw, and
rollover"), every item of the enumeration nearest the question's words. Times
("when ...") and durations are read by :mod:`~memtrace_bench.systems.temporal`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from memtrace_bench.systems import temporal
from memtrace_bench.systems.interfaces import Sentence
from memtrace_bench.systems.time_expressions import month_number
from memtrace_otel.text import CHAT_STOPWORDS, MONTH_NAMES, MONTHS, NUMBER_WORDS, stem

__all__ = ["Doc", "Question", "Text", "Word", "analysed", "enumerations", "list_answer", "parse_question",
           "phrase", "titled", "word_key"]

# A colon between letters or digits stays inside the word: "CS:GO", "10:30".
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:['’:-][A-Za-z0-9]+)*|[\"“”]|[.,;:!?()\[\]—–]|(?<= )-(?= )")
_BREAK = frozenset('.;:!?()[]—–-"“”')
_QUOTE = frozenset('"“”')


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words that frame a question rather than name what it asks about.
_FRAME = _wordset("""
kind kinds type types sort name named called mention mentioned according say said tell told specific
particular something anything someone recently usually often ever currently describe
""")
_STOP = CHAT_STOPWORDS | _FRAME | _wordset("i'm it's that's he's she's we're they're i've i'd i'll")
# Chatter: words that carry the speaker's mood, not a fact (never an answer on their own).
_FILLER = _wordset("""
awesome amazing cool super totally pretty definitely absolutely maybe kinda sorta btw lol wow glad sure
right okay ok yep yup nope hey hi hello guess mean stuff bit lots way gonna wanna gotta fun nice yeah yea
haha incredible fantastic wonderful exciting excited happy thrilled proud sounds looks seems true bet agree
shares photo photography
""")
# Light verbs: they say that something happened, the words around them say what.
_LIGHT = _wordset("went go goes gone got get gets had did done took take came come put let felt feel look "
                  "happened")
_WHEN_WORDS = _wordset("""
yesterday today tonight tomorrow ago last next week weeks weekend weekends month months year years recently
lately monday tuesday wednesday thursday friday saturday sunday fri sat sun mon morning night evening
afternoon earlier later
""")
_NUMBERS = frozenset(NUMBER_WORDS) | _wordset("""
thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
eighty ninety hundred thousand million few couple several dozen half
""")
# Nouns that name a titled or named thing: a quoted or capitalised span answers "what N".
_TITLED = _wordset("""
book books movie movies film films game games song songs show shows band bands series novel novels trilogy
album artist artists title name names team brand restaurant city cities country countries place places
author authors player players location locations state states
""")
# Irregular verb forms and chat spellings, read as the word they stand for (matching, not output).
_SAME = {form: words[0] for line in """
go went gone|draw drew drawn|make made|take took taken|see saw seen|buy bought|give gave given|run ran
write wrote written|get got gotten|feel felt|find found|meet met|win won|begin began begun|think thought
teach taught|bring brought|build built|catch caught|choose chose chosen|eat ate eaten|fall fell fallen
fly flew flown|grow grew grown|hear heard|hold held|keep kept|know knew known|leave left|lose lost|pay paid
ride rode ridden|say said|sell sold|send sent|sing sang sung|sit sat|speak spoke spoken|spend spent
swim swam swum|tell told|wear wore worn|break broke broken|do did done|have had|come came|become became
drive drove driven|favorite fave fav favourite|favorites faves|photo pic picture|photos pics pictures
child kid kids children|mother mom mum|father dad|business biz|birthday bday
""".strip().replace("\n", "|").split("|") for words in [line.split()] for form in words[1:]}
_POSSESSIVE = _wordset("my our his her their")
_CAUSES = _wordset("because cause cuz coz since")
_AT = _wordset("at in to from near into inside outside around")
_PLACE_WORDS = 4
_CARDINALS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
              "twelve")
_ORDINAL_COUNTS = dict(zip(("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
                            "ninth", "tenth", "eleventh", "twelfth"), _CARDINALS[1:], strict=True))
_TIMED = _wordset("when duration number")
_I = _wordset("i i'm i've i'd i'll")
_ORDINAL = re.compile(r"\d+(st|nd|rd|th)")
_AUX = r"(?:is|was|are|were|does|did|do|has|have|had|can|could|will|would|should)\b"
_KINDS = (
    ("yesno", re.compile(rf"^\s*{_AUX}", re.I)),
    ("number", re.compile(r"^\s*(for |after )?how (many|much|long|old|often|far)\b", re.I)),
    ("reason", re.compile(r"^\s*why\b", re.I)),
    ("who", re.compile(r"^\s*(who|whom|whose)\b", re.I)),
    ("where", re.compile(r"^\s*where\b|\b(which|what) (country|city|state|town)\b", re.I)),
    ("name", re.compile(r"\b(name|named|called|title)\b", re.I)),
    ("manner", re.compile(r"^\s*how\b", re.I)),
    ("list", re.compile(r"^\s*(in )?(what|which)\s+(kinds? of |types? of |sorts? of )?"
                        r"(?!(?:does|is|was|has|this|his|its)\b)[a-z]+[^s\W]s\b", re.I)),
)
# "What [new yoga poses] did ...", "Nate's favorite [video game]": the noun phrase asked about.
_HEAD = re.compile(r"^\s*(?:in |for |on |at |with )?(?:what|which)\s+(?:kinds? of |types? of |sorts? of )?"
                   rf"(?!{_AUX})((?:[\w+'/-]+ +)*?[\w+'/-]+)(?= +{_AUX}|\?|$)"
                   r"|\bfavou?rite ([a-z]+(?: [a-z]+)?)", re.I)

# Phrasing: the extra distance of a word before the question's words; how few new words make a
# sentence only set the scene for the next.
_BEFORE, _THIN = 2.0, 1
# How far (in words) a word of each role counts as being from the question's words, beyond its
# distance: chatter answers "how did she feel", rarely anything else.
_ROLE_COSTS = {"content": 0.0}
_MANNER_COSTS = {"content": 0.0, "light": 1.0, "filler": 0.0}
# Phrasing: content words kept per kind of question; list answers: messages read, share of the
# best score they need, items, words per item.
_LENGTH = {"what": 4, "list": 3, "manner": 5, "reason": 6, "who": 3, "where": 3, "name": 4, "number": 3}
_LIST_SCAN, _LIST_SHARE, _LIST_ITEMS, _LIST_WORDS = 20, 0.8, 4, 2
# Words that join the items of an enumeration ("pottery, camping and swimming"), and the words an
# item may open with that are not part of it ("running or playing [my] violin").
_JOINERS = _wordset(", and or")
_DETERMINERS = _wordset("a an the my your his her our their its some")


@dataclass(frozen=True, slots=True)
class Word:
    text: str
    key: str  # stemmed lower-case form; "" for punctuation
    role: str  # "stop", "filler", "light", "time" or "content"
    cap: bool  # capitalised, and not the first word of the sentence
    number: bool


@dataclass(frozen=True, slots=True)
class Text:
    """What the reader needs of one sentence, computed once per text."""

    words: tuple[Word, ...]
    keys: frozenset[str]  # content keys (not stop words)
    facts: frozenset[str]  # keys of words that say something (not chatter, light verbs or dates)
    caps: frozenset[str]  # keys of capitalised words
    times: frozenset[str]  # keys of words that date ("yesterday", "week")
    numbered: bool


@dataclass(slots=True)
class Doc:
    sentence: Sentence
    unit: str
    order: int
    text: Text
    asks: bool  # the sentence is a question
    message: list[Sentence]  # the sentences of its message, as its unit holds them
    score: float = 0.0
    after: Doc | None = None  # the next sentence of the same message


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    kind: str
    terms: frozenset[str]  # the content keys it matches on (not speakers' names, not dates)
    keys: frozenset[str]  # every key it says, speakers' names included
    subject: str | None  # the speaker it is about
    names: frozenset[str]  # the context's speakers' keys
    nicks: frozenset[str]  # their prefixes ("mel" for "melanie")
    head: str | None  # the noun a "what N" question asks for ("game" in "what game ...")
    span: temporal.TimeSpan | None  # the days it is restricted to ("in May 2023")
    month: int | None = None  # the month it is restricted to when it names no year ("in June"): 1-12

    def knows(self, word: Word) -> bool:
        """Whether ``word`` says nothing new: the question says it, or it names a speaker."""
        return bool(word.key) and (word.key in self.keys or word.key in self.names
                                   or (word.cap and word.key in self.nicks))

    def fresh(self, text: Text) -> int:
        """How many facts of a sentence the question does not already say (its times count for "when")."""
        facts = text.facts | text.times if self.kind in _TIMED else text.facts
        return len(facts - self.keys - self.names - (text.caps & self.nicks))


@functools.lru_cache(maxsize=65536)
def word_key(word: str) -> str:
    """Stemmed lower-case form: possessive dropped, irregular and chat forms mapped, final -e/-y evened.

    >>> [word_key(w) for w in ["Ann's", "painting", "running", "inspired", "inspire", "stories", "drew"]]
    ['ann', 'paint', 'run', 'inspir', 'inspir', 'stori', 'draw']
    """
    lower = word.lower().replace("’", "'")
    if lower.endswith("'s"):
        lower = lower[:-2]
    lower = lower.strip("'")
    lower = _SAME.get(lower, lower)
    key = stem(lower)
    if key != lower and len(key) > 3 and key[-1] == key[-2] and key[-1] not in "aeioulsz":
        key = key[:-1]  # "running" -> "run", "planned" -> "plan" (but "falling" -> "fall")
    if key.endswith("e") and len(key) > 3:
        key = key[:-1]
    if key.endswith("y") and len(key) > 3:
        key = key[:-1] + "i"
    return key


def _word(token: str, first: bool) -> Word:
    if not token[0].isalnum():
        return Word(token, "", "stop", False, False)
    lower = token.lower().replace("’", "'")
    role = ("stop" if lower in _STOP or (len(lower) < 2 and not lower.isdigit()) else
            "filler" if lower in _FILLER else "light" if lower in _LIGHT else
            "time" if lower in _WHEN_WORDS else "content")
    return Word(token, word_key(token), role, not first and token[0].isupper() and lower not in _I,
                 lower.isdigit() or lower in _NUMBERS)


@functools.lru_cache(maxsize=100_000)
def analysed(text: str) -> Text:
    """One sentence's words and key sets, memoised: every question reads the same messages."""
    found = tuple(_word(m.group(), i == 0) for i, m in enumerate(_TOKEN.finditer(text)))
    return Text(found, frozenset(w.key for w in found if w.key and w.role != "stop"),
                 frozenset(w.key for w in found if w.role == "content"),
                 frozenset(w.key for w in found if w.cap),
                 frozenset(w.key for w in found if w.role == "time"), any(w.number for w in found))


# -- the question ------------------------------------------------------------------------------
def parse_question(question: str, speakers: set[str]) -> Question:
    found = [_word(m.group(), i == 0) for i, m in enumerate(_TOKEN.finditer(question))]
    by_key = {word_key(s): s for s in speakers if s}
    # The first speaker it names is the one it is about ("What did Evan suggest Sam ...").
    subject = next((by_key[w.key] for w in found if w.key in by_key and w.text[0].isupper()), None)
    span = temporal.question_span(question)
    terms = frozenset(w.key for w in found if w.key and w.role != "stop" and w.key not in by_key
                      and not (span and _dating(w.text.lower())))
    nicks = frozenset(k[:n] for k in by_key for n in range(3, len(k)))
    return Question(question, _kind(question), terms, frozenset(w.key for w in found if w.key),
                     subject, frozenset(by_key), nicks, _head(question), span,
                     None if span else _month(found))


def _month(found: list[Word]) -> int | None:
    """The month a question names with a capital ("in June"; "may" the verb is lower case), or ``None``.

    >>> _month([_word(t, i == 0) for i, t in enumerate("What did Jo do in June ?".split())])
    6
    """
    for w in found:
        lower = w.text.lower()
        if w.cap and lower in MONTH_NAMES:  # a full name: "Jun" or "Mar" may be a name
            return month_number(lower)
    return None



def _kind(question: str) -> str:
    """What the question asks for: ``when``, ``duration``, ``number``, ``who``, ``list`` ...

    >>> [_kind(q) for q in ["How many kids?", "Which books has Ann read?", "Why did Bob go?"]]
    ['number', 'list', 'reason']
    """
    if temporal.is_temporal(question):
        return "when"
    if temporal.is_duration(question):
        return "duration"
    return next((kind for kind, pattern in _KINDS if pattern.search(question)), "what")


def _head(question: str) -> str | None:
    match = _HEAD.search(question)
    if match is None:
        return None
    return word_key(re.split(r"[ /]", match.group(1) or match.group(2))[-1])


def _dating(word: str) -> bool:
    """A word that dates (a month, a year, a day of the month): matched by date, not by word."""
    return word in MONTH_NAMES or word in MONTHS or word.isdigit() or _ORDINAL.fullmatch(word) is not None


# -- phrasing ----------------------------------------------------------------------------------
def phrase(query: Question, doc: Doc, limit: int | None = None) -> str:
    """The answer ``doc`` gives to ``query``: a few words, a name, a number, a time."""
    if query.kind == "when":
        # A sentence that names no time is dated by the rest of its message, when it can be.
        return temporal.answer_when_in(query.text, doc.sentence, doc.message)
    if query.kind == "duration":
        return temporal.answer_duration(query.text, doc.sentence)
    # A yes/no question ("Is Deborah married?") is an inference an extractive reader cannot make:
    # answering "Yes" whenever a sentence matches would pass without reading anything. It gets the
    # sentence's words like any other question (and fails the judge, a natural failure).
    own = words = doc.text.words
    if doc.after is not None and query.fresh(doc.text) <= _THIN:
        # The sentence only sets the scene ("Last Fri I took my kids to a pottery workshop."):
        # what happened there is in the next one.
        words = (*words, *doc.after.text.words)
    if query.kind == "reason":
        own, words = _because(own), _because(words)
    if words is not own:
        # A name or number the sentence itself says answers before any the next one lends
        # ("I watched The Godfather last night." - "I'm gonna make him an offer ...").
        typed = _typed_phrase(query, own, _distances(query, own), doc.sentence.speaker)
        if typed:
            return typed
    near = _distances(query, words)
    typed = _typed_phrase(query, words, near, doc.sentence.speaker)
    return typed or _nearest(query, words, near, limit or _LENGTH.get(query.kind, 4)) or doc.sentence.text


def _because(words: tuple[Word, ...]) -> tuple[Word, ...]:
    """For "why": the clause a word of cause opens ("I chose them 'cause [they help ...]"), when
    the sentence says one; the words before it say what was done, not why."""
    for i, w in enumerate(words[:-1]):
        if w.text.lower().strip("'’") in _CAUSES:
            return words[i + 1:]
    return words


def _distances(query: Question, words: tuple[Word, ...]) -> list[float]:
    """Each word's distance to the nearest of the question's words, a clause break counting three."""
    anchors = [i for i, w in enumerate(words) if query.knows(w)]
    if not anchors:
        return [i / 10 for i in range(len(words))]
    breaks = [0]
    for w in words:
        breaks.append(breaks[-1] + (w.text in _BREAK))
    return [min(abs(i - a) + 3 * abs(breaks[i] - breaks[a]) + _side(i, a, words[a].key == query.head)
                for a in anchors) for i in range(len(words))]


def _side(index: int, anchor: int, head: bool) -> float:
    """Answers follow the question's words ("check out [a dream book]"), but precede the noun
    a "what kind of N" question asks about ("[Marley] flooring")."""
    before = index < anchor
    return _BEFORE if before != head else 0.0


def _nearest(query: Question, words: tuple[Word, ...], near: list[float], limit: int) -> str:
    costs = _MANNER_COSTS if query.kind == "manner" else _ROLE_COSTS
    found = [i for i, w in enumerate(words) if w.role in costs and not query.knows(w)]
    if not found:
        return ""
    ranked, seen = [], set()
    for i in sorted(found, key=lambda i: (near[i] + costs[words[i].role], i)):
        if words[i].key not in seen:  # a word said twice is said once
            seen.add(words[i].key)
            ranked.append(i)
    chosen = ranked[:limit]
    if query.head is not None:
        # "what kind of event": the kind and the noun together ("marching event"), the noun counted
        # in the limit: the farthest words make room, but never the word the noun follows.
        heads = {i + 1 for i in chosen if i + 1 < len(words) and words[i + 1].key == query.head}
        if heads:
            room = max(1, limit - len(heads))
            spare = [i for i in chosen if i + 1 not in heads]
            chosen = [*heads, *(i for i in chosen if i + 1 in heads),
                      *spare[:max(0, room - (len(chosen) - len(spare)))]]
    return " ".join(_clean(words[i].text) for i in sorted(chosen))


def _typed_phrase(query: Question, words: tuple[Word, ...], near: list[float], speaker: str) -> str | None:
    """A number and its noun for "how many", a title or a name for "which"/"who"/"what N"."""
    if query.kind == "number":
        found = [i for i, w in enumerate(words) if (w.number or _count_of(w.text)) and not query.knows(w)]
        if found:
            i = min(found, key=lambda i: (near[i], i))
            # The noun counted, unless the question names it ("How many kids ..." - "three").
            tail = [w.text for w in words[i + 1:i + 3] if w.key and w.role != "stop"][:1]
            tail = [t for t in tail if not query.knows(_word(t, False))]
            return " ".join([_count_of(words[i].text) or words[i].text, *tail])
    if query.kind in ("name", "who", "where") or (titled(query.head) and query.kind in ("what", "list")):
        runs = _name_runs(query, words)
        if runs:
            title = query.kind != "who"  # quotes hold titles, not people
            best = min(runs, key=lambda r: (title and not _quoted(words, r), near[r[0]], r[0]))
            return " ".join(_clean(words[i].text) for i in best)
        if query.kind == "who":
            return _relative(query, words, near, speaker)
        if query.kind == "where":
            return _place(query, words, near)
    return None


def _place(query: Question, words: tuple[Word, ...], near: list[float]) -> str | None:
    """Where, when no place is named: the words a preposition of place opens ("at [the homeless
    shelter]"), up to the clause's end, from the one nearest the question's words."""
    found = [i for i, w in enumerate(words[:-1]) if w.text.lower() in _AT]
    phrases = []
    for i in found:
        run = []
        for w in words[i + 1:i + 1 + _PLACE_WORDS]:
            if w.text in _BREAK or w.role == "time" or w.text.lower() in _AT:
                break
            run.append(w)
        kept = [w for w in run if w.role == "content" and not query.knows(w)]
        if kept:
            phrases.append((near[i], i, " ".join(_clean(w.text) for w in kept)))
    return min(phrases)[2] if phrases else None


def _count_of(token: str) -> str | None:
    """The count an ordinal says so far ("my fourth tournament": four of them), as a word.

    >>> [_count_of(w) for w in ["fourth", "5th", "second", "fourteen"]]
    ['four', 'five', 'two', None]
    """
    lower = token.lower()
    if lower[:-2].isdigit() and _ORDINAL.fullmatch(lower):
        return _CARDINALS[int(lower[:-2])] if int(lower[:-2]) < len(_CARDINALS) else lower[:-2]
    return _ORDINAL_COUNTS.get(lower)


def _quoted(words: tuple[Word, ...], run: list[int]) -> bool:
    return run[0] > 0 and words[run[0] - 1].text in _QUOTE  # the run opens right after a quote mark


def _relative(query: Question, words: tuple[Word, ...], near: list[float], speaker: str) -> str | None:
    """Who, when no name is said: the person a possessive introduces ("my aunt", "her mentors")."""
    found = [i + 1 for i, w in enumerate(words[:-1]) if w.text.lower() in _POSSESSIVE
             and words[i + 1].role == "content" and not query.knows(words[i + 1])]
    if not found:
        return None
    best = min(found, key=lambda i: (near[i], i))
    owner = words[best - 1].text.lower()
    if owner == "my" and speaker:
        owner = f"{speaker}'s"  # said of the speaker, so reported in the third person ("Ann's aunt")
    return f"{owner} {_clean(words[best].text)}"


def _name_runs(query: Question, words: tuple[Word, ...]) -> list[list[int]]:
    """Quoted titles and runs of capitalised words the question does not already say."""
    runs: list[list[int]] = []
    current: list[int] = []
    quoted = False
    for i, w in enumerate(words):
        inside = w.text not in _QUOTE and (quoted or (w.cap and w.role == "content" and not query.knows(w))
                                            or (bool(current) and w.text.lower() in ("of", "the", "&")))
        if inside:
            current.append(i)
            continue
        if current:
            runs.append(current)
        current = []
        if w.text in _QUOTE:
            quoted = not quoted
    if current:
        runs.append(current)
    return [r for r in runs if any(words[i].role != "stop" for i in r)]


@functools.cache
def _titled() -> frozenset[str]:
    return frozenset(word_key(w) for w in _TITLED)


def titled(head: str | None) -> bool:
    """Whether a "what N" question's noun names a titled or named thing ("game", "book", "city")."""
    return head is not None and head in _titled()


def _clean(token: str) -> str:
    return token[:-2] if token.lower().endswith(("'s", "’s")) else token


def list_answer(query: Question, docs: list[Doc]) -> str:
    """A list gathered across the conversation: from each of the best few messages, the items of
    the enumeration nearest the question's words when the sentence enumerates, else one short
    phrase."""
    top = docs[0].score
    picked: list[str] = []
    seen: set[str] = set()
    for doc in docs[:_LIST_SCAN]:
        if (picked and doc.score <= _LIST_SHARE * top) or len(picked) >= _LIST_ITEMS:
            break
        if doc.sentence.dia_id in seen:
            continue
        seen.add(doc.sentence.dia_id)
        words = doc.text.words
        found = enumerations(query, words)
        if found:
            near = _distances(query, words)
            nearest = min(found, key=lambda items: min(near[i] for item in items for i in item))
            items = [" ".join(_clean(words[i].text) for i in item) for item in nearest]
        else:
            items = [phrase(query, doc, _LIST_WORDS)]
        for item in items:
            if item.lower() not in (p.lower() for p in picked):
                picked.append(item)
    return ", ".join(picked)


def enumerations(query: Question, words: tuple[Word, ...]) -> list[list[list[int]]]:
    """The enumerations a sentence makes: runs of words joined by commas, "and" or "or", each item
    (at most ``_LIST_WORDS`` words, as word indices) with the words the question says left out.

    A run longer than an item ("essential oils add warmth") ends the enumeration before it with its
    first words and opens the next with its last ("Candles and [essential oils] add [warmth] and calm").

    >>> q = parse_question("What tricks do Ann's dogs know?", {"Ann"})
    >>> w = analysed("They do tricks like sit, stay, paw, and rollover.").words
    >>> [[" ".join(w[i].text for i in item) for item in found] for found in enumerations(q, w)]
    [['sit', 'stay', 'paw', 'rollover']]
    """
    runs: list[list[int]] = []
    joined: list[bool] = []  # joined[k]: only joiners stand between runs[k] and runs[k + 1]
    run: list[int] = []
    plain, joiner = True, False  # since the last run: nothing but joiners; at least one joiner
    for i, w in enumerate(words):
        lower = w.text.lower()
        if lower in _DETERMINERS:
            continue
        if w.key and w.role != "stop" and lower not in _JOINERS:
            if not run:
                if runs:
                    joined.append(plain and joiner)
                plain, joiner = True, False
            run.append(i)
            continue
        if run:
            runs.append(run)
            run = []
        if lower in _JOINERS:
            joiner = True
        else:
            plain = False
    if run:
        runs.append(run)
    found: list[list[list[int]]] = []
    current: list[list[int]] = []
    for k, run in enumerate(runs):
        before, after = k > 0 and joined[k - 1], k < len(joined) and joined[k]
        if not before:
            found.append(current)
            current = []
        if len(run) <= _LIST_WORDS:
            current.append(run)
            continue
        if before:
            current.append(run[:_LIST_WORDS])
        found.append(current)
        current = [run[-_LIST_WORDS:]] if after else []
    found.append(current)
    enumerated = []
    for items in found:
        fresh = [kept for item in items if (kept := [i for i in item if not query.knows(words[i])])]
        if len(fresh) >= 2:
            enumerated.append(fresh)
    return enumerated
