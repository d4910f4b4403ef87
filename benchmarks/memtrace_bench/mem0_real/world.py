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

import hashlib
import math
import re
from dataclasses import dataclass, field

from memtrace_bench.locomo import QA, Conversation, conversation_from_data, read_conversation_file
from memtrace_otel.text import FACT_STOPWORDS, normalize_answer, stem, token_f1

__all__ = [
    "EMBEDDING_DIMS",
    "FaultRates",
    "World",
    "carries",
    "embed",
    "judge",
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
    wrong_update: float = 0.10
    wrong_delete: float = 0.07
    lossy_merge: float = 0.15
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


def roll(seed: int, call_id: str, salt: str = "") -> float:
    """A uniform number in [0, 1) from the seed and a call id: the same call always rolls the same.

    >>> roll(0, "D1:3/extract") == roll(0, "D1:3/extract") != roll(1, "D1:3/extract")
    True
    """
    digest = hashlib.blake2b(f"{seed}\x1f{call_id}\x1f{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def content_words(text: str) -> list[str]:
    """Stemmed content words (stop words out)."""
    return [stem(w) for w in (m.lower() for m in _WORD.findall(text)) if w not in FACT_STOPWORDS]


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of stemmed content words: how related two facts are.

    >>> round(similarity("Caroline likes painting", "Caroline painted a lake"), 2)
    0.5
    """
    x, y = set(content_words(a)), set(content_words(b))
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
    """The fact with a key detail dropped: its numbers, else a name or the last phrase.

    >>> lossy("Melanie ran a charity race for mental health on 20 May.", 0, "x")
    'Melanie ran a charity race for mental health on May.'
    """
    if _NUMBER.search(fact):
        return re.sub(r"\s+", " ", _NUMBER.sub("", fact)).replace(" .", ".").strip()
    words = fact.rstrip(".").split()
    names = [i for i, w in enumerate(words) if i > 0 and w[:1].isupper()]
    if names:
        drop = names[int(roll(seed, call_id, "lossy") * len(names))]
        return " ".join(words[:drop] + words[drop + 1:]) + "."
    cut = max(3, (2 * len(words)) // 3)
    return " ".join(words[:cut]) + "."


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
    """dia_id -> the turn's observation sentences, in LoCoMo's order."""
    seed: int = 0
    rates: FaultRates = field(default_factory=FaultRates)

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
        for session in conversation.sessions:
            for turn in session.turns:
                if turn.dia_id not in facts:
                    short = paraphrase(turn.speaker, turn.text)
                    if short:
                        facts[turn.dia_id] = [short]
        return cls(conversation, facts, seed, rates or FaultRates())

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
        """``(dia_id, fact)`` per evidence turn with facts: the one sharing most words with the
        question and gold (the first on ties)."""
        wanted = set(content_words(f"{qa.question} {qa.answer}"))
        keys = []
        for dia_id in qa.evidence:
            facts = self.facts.get(dia_id, [])
            if facts:
                best = max(range(len(facts)), key=lambda i: (len(wanted & set(content_words(facts[i]))), -i))
                keys.append((dia_id, facts[best]))
        return keys

    def answerable(self, qa: QA) -> bool:
        """Whether a fault-free run can answer it: every evidence turn has a fact."""
        return bool(qa.evidence) and len(self.key_facts(qa)) == len(set(qa.evidence))

    def case_id(self, qa: QA) -> str:
        return f"mem0-real-{self.conversation.sample_id}-q{qa.index}"

    # -- extraction ----------------------------------------------------------------------------------
    def extraction(self, dia_id: str, call_id: str, *, existing: list[str] | None = None,
                   repaired: bool = False) -> tuple[list[str], list[str], str | None]:
        """``(facts returned, oracle facts, fault)`` for the turn ``dia_id``.

        ``existing`` (2.x, whose extraction sees the store's related memories): facts already held
        are not repeated.
        """
        oracle = [f for f in self.facts.get(dia_id, []) if not any(carries(m, f) for m in existing or [])]
        if repaired or not oracle:
            return list(oracle), oracle, None
        r, rates = roll(self.seed, call_id), self.rates
        index = int(roll(self.seed, call_id, "which") * len(oracle))
        facts = list(oracle)
        if r < rates.omit:
            del facts[index]
            return facts, oracle, f"omitted fact {index}"
        if r < rates.omit + rates.lossy:
            changed = lossy(facts[index], self.seed, call_id)
            if changed != facts[index]:
                facts[index] = changed
                return facts, oracle, f"lossy fact {index}"
        elif r < rates.omit + rates.lossy + rates.swap:
            changed = swapped(facts[index], self.conversation.speakers, self.seed, call_id)
            if changed != facts[index]:
                facts[index] = changed
                return facts, oracle, f"swapped fact {index}"
        return facts, oracle, None

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
            kept = lossy(old, self.seed, call_id)
            decisions[n] = {**decisions[n], "text": f"{kept.rstrip('.')}; {facts_of(decisions[n], old)}"}
            return decisions, oracle, f"lossy merge {decisions[n]['id']}"
        return decisions, oracle, None

    # -- the reader ----------------------------------------------------------------------------------
    def answer(self, qa: QA, context: list[str], call_id: str, *,
               repaired: bool = False) -> tuple[str, str, str | None]:
        """``(answer, oracle answer, fault)`` of the answer call reading ``context`` (memory lines)."""
        keys = self.key_facts(qa)
        held = bool(keys) and len(keys) == len(set(qa.evidence)) and all(
            any(carries(m, fact) for m in context) for _, fact in keys)
        if held:
            oracle = str(qa.answer)
        else:
            scored = [(similarity(qa.question, m), -n, m) for n, m in enumerate(context)]
            best = max(scored, default=None)
            oracle = _first_words(best[2], 12) if best and best[0] > 0 else "I don't know."
        if repaired or not held or roll(self.seed, call_id) >= self.rates.reader:
            return oracle, oracle, None
        others = [m for m in context if not any(carries(m, fact) for _, fact in keys)]
        wrong = _first_words(others[int(roll(self.seed, call_id, "which") * len(others))], 12) if others \
            else "I don't know."
        return wrong, oracle, "reader mistake"


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


def _first_words(text: str, count: int) -> str:
    return " ".join(text.split()[:count])


def _session_order(key: str) -> tuple[int, str]:
    match = re.match(r"session_(\d+)", key)
    return (int(match.group(1)) if match else 0, key)
