"""What the simulated LLM knows and how it errs: facts per turn, seeded faults, the reader's rule.

Shared by the simulated server (``server.py``), the app that drives mem0 (``driver.py``) and the
labelling (``labels.py``); imports nothing of mem0 or of the benchmark's numpy and wordllama, so
it runs in a mem0 venv as well as in the project's.

* **Facts.** A turn's facts are LoCoMo's ``session_N_observation`` sentences for its ``dia_id``:
  human-written, third-person, paraphrased ("Caroline attended an LGBTQ support group recently
  ..."), never the message's words. A turn without an observation yields, if it says enough
  (:data:`PARAPHRASE_MIN_WORDS`), one short third-person paraphrase of its first sentence
  (:func:`paraphrase`), else nothing (chit-chat).
* **Faults** are decided per *call id* (``D3:5/extract``, ``D3:5/decide``, ``q12/answer``), a
  position in the app's flow, never a call's text: a replay that repairs one call meets the same
  faults everywhere else. Whether a call errs, and how, is a hash of the seed and the call id.
* **Carrying.** A memory carries a fact when it holds the fact's sentence (case-insensitive):
  merges keep both sentences whole; lossy facts, swapped facts and lossy merges do not.
* **The reader** (the answer call) answers a question right exactly when its context carries the
  question's *key facts* (per evidence turn, the fact sharing most words with question and gold);
  otherwise it answers from the closest memory, or "I don't know". It errs with a seeded rate
  even when the context holds the facts.
* **The judge** is an LLM-judge call: CORRECT when the normalised gold is in the prediction or the
  token F1 is at least :data:`JUDGE_F1`.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field

from memtrace_bench.locomo import QA, Conversation, conversation_from_data, read_conversation_file
from memtrace_otel.text import (
    FACT_STOPWORDS,
    MONTH_NAMES,
    fact_tokens,
    normalize_answer,
    readable,
    stem,
    token_f1,
)

__all__ = [
    "EMBEDDING_DIMS",
    "FaultRates",
    "World",
    "carries",
    "embed",
    "judge",
    "message_text",
    "roll",
]

EMBEDDING_DIMS = 256
JUDGE_F1 = 0.6
_WORD = re.compile(r"[A-Za-z0-9']+")
_NUMBER = re.compile(r"\b\d+\b")


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Per-call fault probabilities (a call takes at most one fault)."""

    omit: float = 0.07
    lossy: float = 0.06
    swap: float = 0.05
    wrong_date: float = 0.06
    """A dated fact written with its date dropped or resolved against the wrong day."""
    wrong_update: float = 0.20
    wrong_delete: float = 0.18
    """The first build's 0.10 and 0.07 gave 57 and 18 cases over eight conversations; the reader
    now needs only what the question asks, so a damaged memory fails fewer questions (a trial
    build of conversation 26 at 0.15 and 0.15 gave 3 and 4 cases), and a type needs 30 cases over
    the eight. A decision call merges, adds or deletes several facts at once: these are per call."""
    lossy_merge: float = 0.25
    """Of decisions that merge: the merge summarises the old memory (its first half, dates dropped)."""
    reader: float = 0.08


PARAPHRASE_MIN_WORDS = 8
_PRONOUNS = (("I'm", "{s} is"), ("I've", "{s} has"), ("I'll", "{s} will"), ("I'd", "{s} would"),
             ("I", "{s}"), ("my", "{s}'s"), ("My", "{s}'s"), ("me", "{s}"), ("mine", "{s}'s"),
             ("myself", "{s}"), ("we", "{s} and others"), ("We", "{s} and others"), ("our", "their"),
             ("Our", "Their"))


def paraphrase(speaker: str, text: str) -> str | None:
    """A short third-person paraphrase of a turn's first sentence, for turns LoCoMo gives no fact.

    >>> paraphrase("Jon", "Hey! I lost my job at the bank last week, so I'm starting a dance studio.")
    "Jon mentioned that Jon lost Jon's job at the bank last week, so Jon is starting a dance studio."
    >>> paraphrase("Jon", "Thanks, you too!") is None
    True
    """
    sentences = [x.strip() for x in re.split(r"(?<=[.!?])\s+", text) if x.strip()]
    best = max(sentences, key=lambda x: (len(x.split()) >= PARAPHRASE_MIN_WORDS, 0), default="")
    words = best.split()
    if len(words) < PARAPHRASE_MIN_WORDS:
        return None
    table = dict(_PRONOUNS)
    out = []
    for word in words[:30]:
        core = word.strip(",.!?;:")
        replaced = table.get(core)
        out.append(word.replace(core, replaced.format(s=speaker), 1) if replaced else word)
    body = " ".join(out).rstrip(",;:")
    body = body if body[-1:] in ".!?" else body + "."
    return f"{speaker} mentioned that {body[0].lower() + body[1:] if not body.startswith(speaker) else body}"


_SECOND_PERSON = (("you're", "{o} is"), ("You're", "{o} is"), ("you've", "{o} has"), ("You've", "{o} has"),
                  ("you'll", "{o} will"), ("You'll", "{o} will"), ("you'd", "{o} would"),
                  ("You'd", "{o} would"),
                  ("you", "{o}"), ("You", "{o}"), ("your", "{o}'s"), ("Your", "{o}'s"), ("yours", "{o}'s"),
                  ("yourself", "{o}"))
_CAPTION = re.compile(r"\[(?:shares|shared)\s+([^\[\]]+)\]")


def sentences(text: str) -> list[str]:
    """A message's sentences, an image caption (``[shares a photo of ...]``) one of its own.

    >>> sentences("Cool! I ran a race. [shares a photo of a medal]")
    ['Cool!', 'I ran a race.', '[shares a photo of a medal]']
    """
    spaced = _CAPTION.sub(lambda m: f"\n{m.group()}\n", text)
    return [x.strip() for part in spaced.split("\n") for x in re.split(r"(?<=[.!?])\s+", part) if x.strip()]


def statement(speaker: str, other: str, sentence: str) -> str:
    """What a model that keeps the message's words writes of one of its sentences: third person
    (the speaker for "I", the other speaker for "you"), as a fact about who said it.

    >>> statement("Mel", "Caro", "You'll be an awesome mom!")
    'Mel said that Caro will be an awesome mom.'
    >>> statement("Mel", "Caro", "[shares a photo of a medal]")
    'Mel shared a photo of a medal.'
    """
    caption = _CAPTION.fullmatch(sentence.strip())
    if caption:
        return f"{speaker} shared {caption.group(1).strip().rstrip('.')}."
    table = {**dict(_PRONOUNS), **dict(_SECOND_PERSON)}
    out = []
    for word in sentence.split():
        core = word.strip(",.!?;:\"")
        replaced = table.get(core)
        out.append(word.replace(core, replaced.format(s=speaker, o=other), 1) if replaced else word)
    body = " ".join(out).rstrip(",;:!?. ")
    if not body.startswith((speaker, other)):
        body = body[:1].lower() + body[1:]
    return f"{speaker} said that {body}."


def kept_statements(conversation: Conversation, questions: list[QA], facts: dict[str, list[str]],
                    stamps: dict[str, str]
                    ) -> tuple[dict[str, list[str]], dict[tuple[str, int], dict[int, str]]]:
    """``facts`` (per turn, LoCoMo's observation sentences: a model that summarises) as a fault-free
    extraction writes them, one that keeps what the message states: where a question's gold words
    are said by the message of its evidence turn, or of a neighbour as :meth:`World.key_facts`
    allows (the nearest that says them), and no fact of those turns keeps them, that message's
    sentences saying them (:func:`statement`) are joined onto the turn's fact sharing most words
    with the question and gold (a new fact when the turn has none). A fact keeps the words of
    the date it is written with (``stamps``: a resolved "last week" is no missing word).

    LoCoMo's annotators summarise ("A friend made it for my 18th birthday ten years ago." has no
    observation saying "ten years"): nothing the base run writes can carry such a gold, and a real
    model's extraction that leaves out what the message states has made an extraction fault. Only
    the gold words of some question are looked for, when the facts keep less than
    :data:`GOLD_STATED` of them (else a reader answers from the facts and the judge passes), and
    for a time gold the words of the event the question asks (the date is kept as written; "we
    even had a picnic last week" may not be): the rest changes no label. A sentence counts
    when it says a missing gold word and a second gold word or a word of the question's topic, so
    an unrelated sentence sharing one word with the gold (a caption's "woman") is not taken; a
    question ("How long have you been married?") states nothing.

    Returns the facts so written and, per ``(dia_id, fact index)`` that got sentences, the clause
    each question had kept there (by :attr:`QA.index`): a question's key fact is the observation
    and its own clause (:meth:`World.key_facts`), not what was kept for another question.
    """
    turns = {t.dia_id: t for session in conversation.sessions for t in session.turns}
    speakers = conversation.speakers
    names = fact_tokens(" ".join(speakers))
    added: dict[tuple[str, int], list[int]] = {}
    asked: dict[tuple[str, int], dict[int, list[int]]] = {}
    for qa in questions:
        gold = fact_tokens(str(qa.answer))
        topic = fact_tokens(qa.question) - gold - names
        wanted = set(content_words(f"{qa.question} {qa.answer}"))
        for dia_id in dict.fromkeys(qa.evidence):
            near = around(dia_id)
            kept = frozenset().union(*(fact_tokens(dated(f, stamps.get(t, ""))) for _, t in near
                                       for f in facts.get(t, [])))
            # A "when" question's gold is a date the facts keep as written; what can be missing is
            # the event it asks about ("When did Caroline have a picnic?"): its topic words count.
            roots = {_root(t) for t in kept}
            missing = {t for t in gold if _root(t) not in roots}
            if len(gold) - len(missing) >= GOLD_STATED * len(gold):
                missing = set()  # the facts state the gold: a reader answers from them, the judge passes
            if is_time(gold):
                missing |= {t for t in topic if _root(t) not in roots}
            if not missing:
                continue
            for _, turn_id in near:
                turn = turns.get(turn_id)
                if turn is None:
                    continue
                chosen = []
                for i, sentence in enumerate(sentences(turn.text)):
                    if sentence.endswith("?"):  # a question states no fact
                        continue
                    said = fact_tokens(sentence)
                    if said & missing and (len(said & gold) >= 2 or said & topic):
                        chosen.append(i)
                if not chosen:
                    continue
                own = facts.get(turn_id, [])
                target = max(range(len(own)), key=lambda i: (len(wanted & set(content_words(own[i]))), -i),
                             default=-1)
                slot = added.setdefault((turn_id, target), [])
                slot += [i for i in chosen if i not in slot]
                mine = asked.setdefault((turn_id, target), {}).setdefault(qa.index, [])
                mine += [i for i in chosen if i not in mine]
                break
    out = {dia_id: list(values) for dia_id, values in facts.items()}
    clauses: dict[tuple[str, int], dict[int, str]] = {}
    for (turn_id, target), chosen in added.items():
        turn = turns[turn_id]
        other = speakers[1] if turn.speaker == speakers[0] else speakers[0]
        parts = sentences(turn.text)
        stated = {i: statement(turn.speaker, other, parts[i]).rstrip(".") for i in chosen}
        whole = "; ".join(stated[i] for i in sorted(chosen))
        if target < 0:
            out[turn_id] = [joined("", whole)]
        else:
            out[turn_id][target] = joined(out[turn_id][target], whole)
        clauses[(turn_id, max(target, 0))] = {q: "; ".join(stated[i] for i in sorted(mine))
                                             for q, mine in sorted(asked[(turn_id, target)].items())}
    return out, clauses


def joined(fact: str, clause: str) -> str:
    """A fact with a clause of the message's own sentences joined on (the clause alone when the turn
    had no fact).

    >>> joined("Mel went camping.", "Mel said that it rained"), joined("", "Mel said that it rained")
    ('Mel went camping; Mel said that it rained.', 'Mel said that it rained.')
    """
    fact = fact.rstrip().rstrip(".")
    return f"{fact}; {clause}." if fact else f"{clause}."


def _root(token: str) -> str:
    """A fact token with a final "e" dropped: the observation's "hiking" (``hiking``) keeps the gold's
    "hike" (``hike``), which :func:`memtrace_otel.text.fact_tokens` keeps apart.

    >>> _root("hike"), _root("hik")
    ('hik', 'hik')
    """
    token = stem(token)
    return token[:-1] if token.endswith("e") and len(token) > 3 else token


def around(dia_id: str) -> list[tuple[int, str]]:
    """``(distance, dia_id)`` of the turn and its neighbours in its session (:data:`NEIGHBOURS`
    either side), nearest first."""
    match = re.fullmatch(r"D(\d+):(\d+)", dia_id)
    if match is None:
        return [(0, dia_id)]
    session, turn = int(match.group(1)), int(match.group(2))
    near = [(0, dia_id)]
    for distance in range(1, NEIGHBOURS + 1):
        near += [(distance, f"D{session}:{turn + step}") for step in (-distance, distance) if turn + step > 0]
    return near


def roll(seed: int, call_id: str, salt: str = "") -> float:
    """A uniform number in [0, 1) from the seed and a call id: the same call always rolls the same.

    >>> roll(0, "D1:3/extract") == roll(0, "D1:3/extract") != roll(1, "D1:3/extract")
    True
    """
    digest = hashlib.blake2b(f"{seed}\x1f{call_id}\x1f{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


_BRACKETED = re.compile(r"\[([^\[\]]+)\]")
_TAG = re.compile(r"\([^()]*\)")
_DATE_TAG = re.compile(r"\s*\(([^()]*\b\d{4})\)(?=\.?$)")


def message_text(when: str, speaker: str, text: str) -> str:
    """A turn as the app sends it to mem0: mem0's own LoCoMo evaluation writes ``Speaker: text``
    and passes the session's time as ``metadata["timestamp"]``; the time is also put before the
    message, the only way mem0 OSS's extraction sees when it was said (1.x's prompt has no date,
    2.x's ``timestamp`` argument is for the platform only).

    >>> message_text("1:56 pm on 8 May, 2023", "Caroline", "I went to a group yesterday.")
    '[1:56 pm on 8 May, 2023] Caroline: I went to a group yesterday.'
    """
    return f"[{when}] {speaker}: {text}"


def relative_times(text: str, date: str) -> list[str]:
    """What each relative time in ``text`` ("yesterday", "last week", "two years ago") means when
    said on ``date`` (``8 May 2023``), as gold answers state it: the project's own resolution
    (:func:`memtrace_otel.text.readable` of the dated line), in the order said.

    >>> relative_times("I went to a support group yesterday [shares a photo of a flag]", "8 May 2023")
    ['7 May 2023']
    >>> relative_times("We went camping last week.", "27 June 2023")
    ['the week before 27 June 2023']
    """
    line = " ".join(text.split())
    said = Counter(_BRACKETED.findall(line))  # the message's own brackets (image captions) are not times
    meanings = []
    for meaning in _BRACKETED.findall(readable(f"[{date}] {line}").partition("] ")[2]):
        if said[meaning] > 0:
            said[meaning] -= 1
        elif meaning not in meanings:
            meanings.append(meaning)
    return meanings


def dated(fact: str, stamp: str) -> str:
    """A fact as a model that knows when its message was said writes it: its time in brackets
    at the end (the resolved relative times, else the day it was said).

    >>> dated("Melanie went camping with her family.", "the week before 27 June 2023")
    'Melanie went camping with her family (the week before 27 June 2023).'
    """
    return f"{fact.rstrip().rstrip('.')} ({stamp})." if stamp else fact


def undated(text: str) -> str:
    """``text`` without the date tag :func:`dated` puts at its end (what relatedness compares).

    >>> undated("Melanie went camping (the week before 27 June 2023).")
    'Melanie went camping.'
    """
    return _DATE_TAG.sub("", text)


def shift_day(date: str, days: int) -> str:
    """``8 May 2023`` moved by ``days`` (unchanged when it does not parse).

    >>> shift_day("8 May 2023", -7)
    '1 May 2023'
    """
    try:
        day = datetime.datetime.strptime(date, "%d %B %Y").date() + datetime.timedelta(days=days)
    except ValueError:
        return date
    return f"{day.day} {day.strftime('%B')} {day.year}"


def content_words(text: str) -> list[str]:
    """Stemmed content words (stop words out)."""
    return [stem(w) for w in (m.lower() for m in _WORD.findall(text)) if w not in FACT_STOPWORDS]


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of stemmed content words: how related two facts are.

    >>> round(similarity("Caroline likes painting", "Caroline painted a lake"), 2)
    0.5
    """
    x, y = set(content_words(undated(a))), set(content_words(undated(b)))
    return len(x & y) / len(x | y) if x and y else 0.0


def carries(memory: str, fact: str) -> bool:
    """Whether a memory holds a fact's sentence whole (merged memories hold several)."""
    return _norm(fact) in _norm(memory)


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def embed(text: str, dims: int = EMBEDDING_DIMS) -> list[float]:
    """A deterministic offline embedding: hashed stemmed words (weight 1) and character 4-grams of
    each word (weight 0.3), unit length. Paraphrases sharing names and topic words land close;
    ones that share few words do not, as with a small real model.
    """
    vector = [0.0] * dims
    for word in content_words(text):
        _add(vector, "w:" + word, 1.0)
        padded = f"<{word}>"
        for i in range(max(1, len(padded) - 3)):
            _add(vector, "g:" + padded[i:i + 4], 0.3)
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def _add(vector: list[float], feature: str, weight: float) -> None:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    index = int.from_bytes(digest[:4], "big") % len(vector)
    vector[index] += weight if digest[4] & 1 else -weight


def judge(prediction: str, gold: str) -> bool:
    """The LoCoMo-style judge: the gold's words in the prediction, or token F1 >= :data:`JUDGE_F1`.

    >>> judge("On 7 May 2023", "7 May 2023"), judge("I don't know.", "7 May 2023")
    (True, False)
    """
    gold_n, prediction_n = normalize_answer(str(gold)), normalize_answer(prediction)
    if gold_n and gold_n in prediction_n:
        return True
    return token_f1(prediction, str(gold)) >= JUDGE_F1


def lossy(fact: str, seed: int, call_id: str) -> str:
    """The fact with a key detail dropped: its numbers, else a name or the last phrase. Date tags
    (:func:`dated`) are left alone: losing a date is its own fault.

    >>> lossy("Melanie ran a charity race for mental health on 20 May.", 0, "x")
    'Melanie ran a charity race for mental health on May.'
    >>> lossy("Caroline has 3 kids (8 May 2023); Caroline likes Paris (9 May 2023).", 0, "x")
    'Caroline has kids (8 May 2023); Caroline likes Paris (9 May 2023).'
    """
    tags = [m.span() for m in _TAG.finditer(fact)]

    def free(match: re.Match[str]) -> bool:
        return not any(a <= match.start() < b for a, b in tags)

    numbers = [m for m in _NUMBER.finditer(fact) if free(m)]
    if numbers:
        out = fact
        for m in reversed(numbers):
            out = out[:m.start()] + out[m.end():]
        return re.sub(r"\s+", " ", out).replace(" .", ".").strip()
    words = [m for m in re.finditer(r"\S+", fact.rstrip("."))]
    names = [m for i, m in enumerate(words) if i > 0 and m.group()[:1].isupper() and free(m)]
    if names:
        drop = names[int(roll(seed, call_id, "lossy") * len(names))]
        return re.sub(r"\s+", " ", fact[:drop.start()] + fact[drop.end():]).replace(" .", ".").strip()
    cut = max(3, (2 * len(words)) // 3)
    return " ".join(m.group() for m in words[:cut]) + "."


def summarised(memory: str) -> str:
    """A memory as a lossy merge keeps it: its first half, its dates and details dropped.

    >>> summarised("Caroline ran a charity race for mental health last Saturday (20 May 2023).")
    'Caroline ran a charity race.'
    """
    words = _TAG.sub("", memory).replace(";", ",").split()
    return " ".join(words[:max(3, len(words) // 2)]).rstrip(",;:.") + "."


def swapped(fact: str, speakers: tuple[str, str], seed: int, call_id: str) -> str:
    """The fact about the wrong entity or with a wrong number.

    >>> swapped("Caroline has 3 kids.", ("Caroline", "Melanie"), 0, "x")
    'Caroline has 4 kids.'
    >>> swapped("Caroline went hiking.", ("Caroline", "Melanie"), 0, "x")
    'Melanie went hiking.'
    """
    number = _NUMBER.search(fact)
    if number:
        return fact[:number.start()] + str(int(number.group()) + 1) + fact[number.end():]
    for name, other in (speakers, speakers[::-1]):
        if name in fact:
            return fact.replace(name, other)
    words = fact.split()
    return " ".join(["Someone", *words[1:]]) if len(words) > 1 else "Someone."


@dataclass(slots=True)
class World:
    """One LoCoMo conversation as the simulated LLM sees it."""

    conversation: Conversation
    facts: dict[str, list[str]]
    """dia_id -> the turn's facts as a fault-free extraction writes them: the observation sentences,
    in LoCoMo's order, each dated (:func:`dated`) with the turn's :attr:`stamps`."""
    base: dict[str, list[str]] = field(default_factory=dict)
    """dia_id -> the fault-free facts undated: the observation sentences as LoCoMo writes them, each
    with the message's clauses the observation left out that state a question's gold
    (:func:`kept_statements`)."""
    stamps: dict[str, str] = field(default_factory=dict)
    """dia_id -> the time its facts are dated with: the turn's relative times resolved against its
    session's date, else that date."""
    when: dict[int, str] = field(default_factory=dict)
    """session index -> its date and time as LoCoMo writes it (``1:56 pm on 8 May, 2023``): what the
    app passes to mem0 (``metadata={"timestamp": ...}``, as mem0's own LoCoMo evaluation does)."""
    seed: int = 0
    rates: FaultRates = field(default_factory=FaultRates)
    observed: dict[str, list[str]] = field(default_factory=dict)
    """dia_id -> what the base run's extraction writes (undated): the observation sentences alone, a
    model that summarises; where they differ from :attr:`base` the call omitted what the message
    stated (fault ``omitted-by-observation``)."""
    asked: dict[tuple[str, int], dict[int, str]] = field(default_factory=dict)
    """``(dia_id, fact index)`` -> question index -> the clause of the message's sentences kept in
    :attr:`base`'s fact for that question (:func:`kept_statements`): a fuller fact can hold
    sentences kept for several questions; each question's key fact holds only its own."""
    _keys: dict[int, list[tuple[str, str]]] = field(default_factory=dict, repr=False)
    _whole: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, conversation_id: str, *, seed: int = 0, directory: str | None = None,
             max_sessions: int | None = None, rates: FaultRates | None = None) -> World:
        raw = read_conversation_file(conversation_id, directory)
        conversation = conversation_from_data(conversation_id, raw)
        if max_sessions is not None:
            conversation = conversation.truncated(max_sessions)
        facts: dict[str, list[str]] = {}
        for key in sorted(raw, key=_session_order):
            value = raw[key]
            observation = key.startswith("session_") and key.endswith("_observation")
            if not observation or not isinstance(value, dict):
                continue
            for speaker in sorted(value):
                for item in value[speaker] if isinstance(value[speaker], list) else []:
                    if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
                        for dia_id in re.findall(r"D\d+:\d+", item[1]):
                            facts.setdefault(dia_id, []).append(item[0].strip())
        stamps: dict[str, str] = {}
        when: dict[int, str] = {}
        for session in conversation.sessions:
            when[session.index] = str(raw.get(f"session_{session.index}_date_time", session.date))
            for turn in session.turns:
                if turn.dia_id not in facts:
                    short = paraphrase(turn.speaker, turn.text)
                    if short:
                        facts[turn.dia_id] = [short]
                if turn.dia_id in facts:
                    stamps[turn.dia_id] = "; ".join(relative_times(turn.text, session.date)) or session.date
        questions = [q for q in conversation.questions if q.category in (1, 2, 3, 4) and q.evidence]
        full, asked = kept_statements(conversation, questions, facts, stamps)
        for dia_id in sorted(full.keys() - facts.keys()):  # a turn given its first fact: dated as others
            given = conversation.turn(dia_id)
            if given is not None:
                stamps[dia_id] = "; ".join(relative_times(given.text, given.date)) or given.date
        dated_facts = {d: [dated(f, stamps.get(d, "")) for f in fs] for d, fs in full.items()}
        return cls(conversation, dated_facts, full, stamps, when, seed, rates or FaultRates(), facts, asked)

    # -- the conversation --------------------------------------------------------------------------
    def questions(self) -> list[QA]:
        """Categories 1-4 (5 is adversarial: no gold answer), in LoCoMo's order."""
        return [q for q in self.conversation.questions if q.category in (1, 2, 3, 4) and q.evidence]

    def question_by_text(self, text: str) -> QA | None:
        for qa in self.questions():
            if qa.question == text:
                return qa
        return None

    def key_facts(self, qa: QA) -> list[tuple[str, str]]:
        """``(dia_id, fact)`` per evidence turn with facts: the one stating most of the gold, then
        sharing most words with the question and gold (the first on ties).

        LoCoMo's evidence id sometimes names the turn next to the one that says the answer (a
        question and its reply, a photo and what is said about it): a fact of a neighbouring turn
        of the same session (:data:`NEIGHBOURS` either side) is the key fact when it states more of
        the gold than the evidence turn's own; the pair then names the turn the fact came from.

        A fact is read as the question asks it (:meth:`asks`): the observation and the sentences
        kept for this question, not those a fuller fact keeps for another one.
        """
        if qa.index in self._keys:
            return self._keys[qa.index]
        gold = fact_tokens(str(qa.answer))
        wanted = set(content_words(f"{qa.question} {qa.answer}"))
        keys = []
        for dia_id in dict.fromkeys(qa.evidence):
            if not self.facts.get(dia_id):
                continue
            scored = []
            for distance, turn_id in around(dia_id):
                for i, whole in enumerate(self.facts.get(turn_id, [])):
                    fact = self.asks(qa, turn_id, i)
                    said = len(gold & fact_tokens(fact))
                    if not fact or (distance and not said):
                        continue
                    rank = (said, -distance, len(wanted & set(content_words(fact))), -i)
                    scored.append((rank, turn_id, fact, whole))
            if not scored:  # the turn's only fact was kept for other questions
                continue
            best = max(scored, key=lambda x: x[0])
            keys.append((best[1], best[2]))
            self._whole[(best[1], best[2])] = best[3]
        self._keys[qa.index] = keys
        return keys

    def asks(self, qa: QA, dia_id: str, index: int) -> str:
        """The turn's fact ``index`` as the question ``qa`` needs it, dated: the observation and the
        message's sentences kept for ``qa`` (:attr:`asked`); ``""`` when the fact holds only
        sentences kept for other questions.

        The oracle extraction writes every kept sentence into one fuller fact; a question that
        needs its key fact whole (:meth:`needed`) needs what it asks about, not a sentence kept for
        another question ("How many children does Melanie have?" does not need "that roadtrip this
        past weekend was insane", kept for a question about the road trip).
        """
        whole = self.facts[dia_id][index]
        clauses = self.asked.get((dia_id, index))
        if not clauses:
            return whole
        observed = self.observed.get(dia_id, [])
        observation = observed[index] if index < len(observed) else ""
        own = clauses.get(qa.index)
        text = joined(observation, own) if own else observation
        return dated(text, self.stamps.get(dia_id, "")) if text else ""

    def holds(self, memory: str, dia_id: str, fact: str) -> bool:
        """Whether ``memory`` holds the key fact ``fact`` of turn ``dia_id`` whole: its sentence, or
        the fuller fact it was read from (:meth:`asks`), which keeps sentences for other questions
        between the observation and this question's."""
        return carries(memory, fact) or carries(memory, self._whole.get((dia_id, fact), fact))

    def answerable(self, qa: QA) -> bool:
        """Whether a fault-free run can answer it: every evidence turn has a fact."""
        return bool(qa.evidence) and len(self.key_facts(qa)) == len(set(qa.evidence))

    def stated(self, qa: QA) -> bool:
        """Whether the key facts state the gold (most of its words, dates resolved) rather than
        support an answer the reader infers (LoCoMo's open-domain and abstractive golds)."""
        gold = fact_tokens(str(qa.answer))
        said = frozenset().union(*(fact_tokens(f) for _, f in self.key_facts(qa)))
        return bool(gold) and len(gold & said) >= GOLD_STATED * len(gold)

    def needed(self, qa: QA, dia_id: str, fact: str) -> frozenset[str] | None:
        """What of the key fact ``fact`` a memory must say for the reader to answer from it: the
        words it shares with the question and the gold, and its whole date when the gold is a time.
        ``None`` when the fact states nothing of the gold: the reader infers the answer from the
        fact as a whole, so the memory must hold it whole."""
        gold, tokens = fact_tokens(str(qa.answer)), fact_tokens(fact)
        if not gold & tokens:
            return None
        need = tokens & (gold | fact_tokens(qa.question))
        if is_time(gold):  # a time: the whole date counts, and what happened on it
            need |= fact_tokens(self.stamps.get(dia_id, "")) | self.event(qa, fact)
        return need

    def event(self, qa: QA, fact: str) -> frozenset[str]:
        """What the key fact ``fact`` says about the event a "when" question asks: its words the
        question says (the gold's out); when those are only the speakers' names, the fact's own
        words (the event is then the fact as a whole).

        A real reader answers "When did John start his new job?" from a line saying John started
        the job on that date, not from any line of that date naming John.
        """
        gold, names = fact_tokens(str(qa.answer)), fact_tokens(" ".join(self.conversation.speakers))
        own = fact_tokens(undated(fact)) - gold
        asked = own & fact_tokens(qa.question)
        return asked if asked - names else own

    def answers(self, qa: QA, dia_id: str, fact: str, memory: str) -> bool:
        """Whether ``memory`` says what the question needs of its key fact ``fact`` (:meth:`needed`):
        a lossy fact that kept the answer still answers; one that lost it, a fact about the other
        speaker or with a wrong date when the gold is a date do not."""
        need = self.needed(qa, dia_id, fact)
        return self.holds(memory, dia_id, fact) if need is None else need <= fact_tokens(memory)

    def states(self, qa: QA, memory: str) -> bool:
        """Whether ``memory`` states the gold about what the question asks, whichever turn it came
        from (LoCoMo's evidence ids sometimes name the turn before the one that says it): every
        word of the gold and at least two of the question's (all when it has fewer); for a time,
        the whole date and what a key fact says of the event asked (:meth:`event`).

        The reader answers from such a memory as a real one would.
        """
        gold, said = fact_tokens(str(qa.answer)), fact_tokens(memory)
        if not gold or not gold <= said:
            return False
        keys = self.key_facts(qa)
        if is_time(gold) and keys:  # the date and what the question asks happened on it
            return any(self.event(qa, fact) <= said for _, fact in keys)
        asked = fact_tokens(qa.question) - gold
        return len(asked & said) >= min(2, len(asked))

    def relevant(self, qa: QA, memory: str) -> bool:
        """Whether ``memory`` answers for one of the question's key facts or states its gold (what a
        correct retriever returns for the question)."""
        return self.states(qa, memory) or any(self.answers(qa, d, f, memory) for d, f in self.key_facts(qa))

    def case_id(self, qa: QA) -> str:
        return f"mem0-real-{self.conversation.sample_id}-q{qa.index}"

    # -- extraction ----------------------------------------------------------------------------------
    def extraction(self, dia_id: str, call_id: str, *, existing: list[str] | None = None,
                   repaired: bool = False, timed: bool = True) -> tuple[list[str], list[str], str | None]:
        """``(facts returned, oracle facts, fault)`` for the turn ``dia_id``.

        The oracle keeps what the message states (:attr:`base`); the call writes the observation
        sentences (:attr:`observed`), a model that summarises, and where they left out what the
        oracle keeps the fault says ``omitted-by-observation`` (after a seeded fault, if any).
        ``existing`` (2.x, whose extraction sees the store's related memories): facts already held
        are not repeated. ``timed``: whether the message said when it was said; a model cannot
        resolve "last week" otherwise, and writes the facts undated.
        """
        stamp = self.stamps.get(dia_id, "") if timed else ""
        held = existing or []
        oracle = [f for f in (dated(b, stamp) for b in self.base.get(dia_id, []))
                  if not any(carries(m, f) for m in held)]
        written = self.observed if self.observed else self.base  # a World made without observations
        pairs = [(b, dated(b, stamp)) for b in written.get(dia_id, [])]
        pairs = [(b, f) for b, f in pairs if not any(carries(m, f) for m in held)]
        facts, summarised_out = [f for _, f in pairs], None
        if facts != oracle:
            summarised_out = "omitted-by-observation"
        if repaired or not facts:
            return (list(oracle), oracle, None) if repaired else (facts, oracle, summarised_out)
        fault = self._seeded_fault(dia_id, call_id, facts, pairs, stamp)
        return facts, oracle, "; ".join(f for f in (fault, summarised_out) if f) or None

    def _seeded_fault(self, dia_id: str, call_id: str, facts: list[str], pairs: list[tuple[str, str]],
                      stamp: str) -> str | None:
        """Apply the call's seeded fault, if any, to ``facts`` (in place: what the model writes, one
        ``(undated, dated)`` pair per fact); the fault's description."""
        clean = [f for _, f in pairs]
        r, rates = roll(self.seed, call_id), self.rates
        index = int(roll(self.seed, call_id, "which") * len(clean))
        base = pairs[index][0]
        # A fault damages the sentence and keeps its date (the date has its own fault below).
        if r < rates.omit:
            del facts[index]
            return f"omitted fact {index}"
        if r < rates.omit + rates.lossy:
            changed = dated(lossy(base, self.seed, call_id), stamp)
            if changed != facts[index]:
                facts[index] = changed
                return f"lossy fact {index}"
        elif r < rates.omit + rates.lossy + rates.swap:
            changed = dated(swapped(base, self.conversation.speakers, self.seed, call_id), stamp)
            if changed != facts[index]:
                facts[index] = changed
                return f"swapped fact {index}"
        elif r < rates.omit + rates.lossy + rates.swap + rates.wrong_date and stamp:
            # Half drop the time (the sentence as LoCoMo wrote it); half resolve it against the
            # wrong day (a week early: the model read the wrong session's date).
            if roll(self.seed, call_id, "date") < 0.5:
                facts[index] = base
                return f"dropped date {index}"
            turn = self.conversation.turn(dia_id)
            early = shift_day(turn.date, -7) if turn is not None else ""
            wrong = "; ".join(relative_times(turn.text, early)) if turn is not None else ""
            facts[index] = dated(base, wrong or early)
            if facts[index] != clean[index]:
                return f"wrong date {index}"
            facts[index] = clean[index]
        return None

    # -- the update decision (1.x) -------------------------------------------------------------------
    def decision(self, existing: list[tuple[str, str]], facts: list[str], call_id: str, *,
                 repaired: bool = False) -> tuple[list[dict[str, str]], list[dict[str, str]], str | None]:
        """``(decisions, oracle decisions, fault)``: mem0 1.x's ``{"id", "text", "event"}`` items.

        The oracle: a fact already held -> NONE; one related to a memory (word overlap at least
        :data:`RELATED`, the merge not too long) -> UPDATE merging both sentences; else ADD.
        Faults: a wrong UPDATE target (an ADD written over the most similar memory instead), a
        wrong DELETE (the most similar memory removed besides), a lossy merge (the old memory's
        sentence cut short in the merge).
        """
        oracle, touched, texts = [], set(), dict(existing)
        for fact in facts:
            held = next((i for i, t in existing if carries(t, fact)), None)
            if held is not None:
                oracle.append({"id": held, "text": texts[held], "event": "NONE"})
                continue
            related = [(similarity(fact, t), i) for i, t in existing
                       if i not in touched and len(texts[i]) + len(fact) < MERGE_LIMIT]
            best = max(related, default=(0.0, ""), key=lambda x: (x[0], -int(x[1]) if x[1].isdigit() else 0))
            if best[0] >= RELATED:
                touched.add(best[1])
                merged = f"{texts[best[1]].rstrip('.')}; {fact}"
                oracle.append({"id": best[1], "text": merged, "event": "UPDATE",
                               "old_memory": texts[best[1]]})
            else:
                oracle.append({"id": str(len(existing) + len(oracle)), "text": fact, "event": "ADD"})
        decisions = [dict(d) for d in oracle]
        if repaired or not existing:
            return decisions, oracle, None
        r, rates = roll(self.seed, call_id), self.rates
        untouched = [(i, t) for i, t in existing if i not in touched]
        adds = [n for n, d in enumerate(decisions) if d["event"] == "ADD"]
        updates = [n for n, d in enumerate(decisions) if d["event"] == "UPDATE"]
        if r < rates.wrong_update:
            if adds and untouched:
                n = adds[int(roll(self.seed, call_id, "which") * len(adds))]
                target = _most_similar(decisions[n]["text"], untouched)
                decisions[n] = {"id": target[0], "text": decisions[n]["text"], "event": "UPDATE",
                                "old_memory": target[1]}
                return decisions, oracle, f"wrong UPDATE target {target[0]}"
        elif r < rates.wrong_update + rates.wrong_delete:
            if untouched and facts:
                target = _most_similar(" ".join(facts), untouched)
                decisions.append({"id": target[0], "text": target[1], "event": "DELETE"})
                return decisions, oracle, f"wrong DELETE {target[0]}"
        elif r < rates.wrong_update + rates.wrong_delete + rates.lossy_merge and updates:
            n = updates[int(roll(self.seed, call_id, "which") * len(updates))]
            old = decisions[n]["old_memory"]
            kept = summarised(old)
            decisions[n] = {**decisions[n], "text": f"{kept.rstrip('.')}; {facts_of(decisions[n], old)}"}
            return decisions, oracle, f"lossy merge {decisions[n]['id']}"
        return decisions, oracle, None

    # -- the reader ----------------------------------------------------------------------------------
    def answer(self, qa: QA, context: list[str], call_id: str, *,
               repaired: bool = False) -> tuple[str, str, str | None]:
        """``(answer, oracle answer, fault)`` of the answer call reading ``context`` (memory lines)."""
        keys = self.key_facts(qa)
        # The reader answers from what its context says: every evidence turn's key fact must be
        # answered for by some line (the needed words, not the observation's exact sentence).
        held = (bool(keys) and len(keys) == len(set(qa.evidence)) and all(
            any(self.answers(qa, d, fact, m) for m in context) for d, fact in keys)) or any(
            self.states(qa, m) for m in context)
        if held:
            oracle = str(qa.answer)
        else:
            scored = [(similarity(qa.question, m), -n, unstamped(m)) for n, m in enumerate(context)]
            best = max(scored, default=None)
            oracle = _first_words(best[2], 12) if best and best[0] > 0 else "I don't know."
        if repaired or not held or roll(self.seed, call_id) >= self.rates.reader:
            return oracle, oracle, None
        others = [m for m in context if not self.relevant(qa, m)]
        picked = others[int(roll(self.seed, call_id, "which") * len(others))] if others else None
        wrong = _first_words(unstamped(picked), 12) if picked else "I don't know."
        return wrong, oracle, "reader mistake"


def is_time(gold: frozenset[str]) -> bool:
    """Whether a gold (its fact tokens) is a time: a number or a month in it."""
    return any(t.isdigit() or t in MONTH_NAMES for t in gold)


NEIGHBOURS = 2
"""How many turns either side of an evidence turn its key fact may come from (:meth:`World.key_facts`)."""
GOLD_STATED = 0.75
"""Share of the gold's words the key facts must say for the gold to count as stated (:meth:`World.stated`)."""
RELATED = 0.22
"""Word overlap from which a new fact is merged into an existing memory (UPDATE)."""
MERGE_LIMIT = 360
"""A merge may not grow a memory past this many characters (it is added instead)."""


def facts_of(decision: dict[str, str], old: str) -> str:
    """The new fact of a merge decision: its text after the old memory's sentence."""
    text = decision["text"]
    prefix = old.rstrip(".") + "; "
    return text[len(prefix):] if text.startswith(prefix) else text


def _most_similar(text: str, memories: list[tuple[str, str]]) -> tuple[str, str]:
    return max(memories, key=lambda m: (similarity(text, m[1]), -memories.index(m)))


_STAMP = re.compile(r"^.{0,40}?\b\d{4}: ")


def unstamped(line: str) -> str:
    """A context line without the timestamp the app puts before it.

    >>> unstamped("1:56 pm on 8 May, 2023: Caroline went hiking.")
    'Caroline went hiking.'
    """
    return _STAMP.sub("", line, count=1)


def _first_words(text: str, count: int) -> str:
    return " ".join(text.split()[:count])


def _session_order(key: str) -> tuple[int, str]:
    match = re.match(r"session_(\d+)", key)
    return (int(match.group(1)) if match else 0, key)
