"""LoCoMo as MemBase's ``LoCoMo`` dataset presents it (``membase/datasets/locomo.py``).

MemBase numbers the conversations of ``locomo10.json`` from 1 and names every
message ``U<n>:<dia_id>`` (``U1:D1:3``), every question ``locomo-qa-<n>-<i>``
(``i`` from 1 over all of the conversation's questions) and every construction
session ``locomo-<n>-session-<s>``; evidence ids are written the messages' way
(``U1:D1:3``). A message's content is its text; its time the session's, in ISO
form. The data is read in place, never copied.

The facts a simplified memory system extracts are LoCoMo's own per-turn
observations (``session_N_observation``): third-person sentences written by
people, paraphrasing the turn they cite, as an LLM extractor's facts would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from memtrace_bench.locomo import read_conversation_file

__all__ = ["Conversation", "Fact", "Question", "Turn", "load", "sample_index"]

# locomo10.json's order (snap-research/locomo): MemBase's sample index n of conversation conv-<id>.
_LOCOMO10 = ("26", "30", "41", "42", "43", "44", "47", "48", "49", "50")
_DIA = re.compile(r"D\d+:\d+")
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True, slots=True)
class Fact:
    """One observation sentence and the turn it cites."""

    dia_id: str
    speaker: str
    text: str


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    message_id: str
    speaker: str
    text: str
    session: int
    timestamp: str
    facts: tuple[Fact, ...]


@dataclass(frozen=True, slots=True)
class Question:
    qid: str
    question: str
    answer: str
    evidence: tuple[str, ...]
    category: int


@dataclass
class Conversation:
    conversation_id: str
    sample: int
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]
    sessions: list[int] = field(default_factory=list)

    def message_id(self, dia_id: str) -> str:
        return f"U{self.sample}:{dia_id}"


def sample_index(conversation_id: str) -> int:
    """MemBase's 1-based index of a LoCoMo conversation (its place in ``locomo10.json``)."""
    if conversation_id in _LOCOMO10:
        return _LOCOMO10.index(conversation_id) + 1
    return 100 + sum(ord(c) for c in conversation_id) % 900  # not in locomo10: any stable number


def _iso(date: str) -> str:
    try:
        return datetime.strptime(date.strip(), "%I:%M %p on %d %B, %Y").isoformat()
    except ValueError:
        return date


def _facts(data: dict[str, object]) -> dict[str, list[Fact]]:
    found: dict[str, list[Fact]] = {}
    for key in sorted(data, key=lambda k: (len(k), k)):
        if not (key.startswith("session_") and key.endswith("_observation")):
            continue
        value = data[key]
        if not isinstance(value, dict):
            continue
        for speaker, items in value.items():
            for item in items if isinstance(items, list) else []:
                if not isinstance(item, list) or len(item) < 2 or not isinstance(item[0], str):
                    continue
                for dia in _DIA.findall(" ".join(str(e) for e in item[1:])):
                    found.setdefault(dia, []).append(Fact(dia, str(speaker), item[0].strip()))
    return found


def load(conversation_id: str, max_sessions: int, directory: str | None = None) -> Conversation:
    """The first ``max_sessions`` sessions of a conversation and the questions they answer.

    A question is kept when it is not adversarial (category 5) and each of its evidence turns
    is in the window and has an observation (the information a memory system could keep).
    Raises ``FileNotFoundError`` / ``ValueError`` naming the file.
    """
    data = read_conversation_file(conversation_id, directory)
    sample = sample_index(conversation_id)
    facts = _facts(data)
    indexes = sorted(int(m.group(1)) for k, v in data.items()
                     if (m := _SESSION.fullmatch(k)) and isinstance(v, list) and v)[:max_sessions]
    turns: list[Turn] = []
    for index in indexes:
        stamp = _iso(str(data.get(f"session_{index}_date_time", "")))
        session = data[f"session_{index}"]
        for raw in session if isinstance(session, list) else []:  # a list: indexes keep only those
            if not isinstance(raw, dict) or not isinstance(raw.get("dia_id"), str):
                continue
            dia = raw["dia_id"]
            turns.append(Turn(dia, f"U{sample}:{dia}", str(raw.get("speaker", "")), str(raw.get("text", "")),
                              index, stamp, tuple(facts.get(dia, ()))))
    present = {t.dia_id for t in turns if t.facts}
    questions = []
    listed = data.get("qa")
    for number, raw in enumerate(listed if isinstance(listed, list) else [], start=1):
        if not isinstance(raw, dict):
            continue
        cited = raw.get("evidence")
        evidence = tuple(dict.fromkeys(_DIA.findall(" ".join(str(e) for e in cited)))) \
            if isinstance(cited, list) else ()
        category = int(raw.get("category", 0) or 0)
        answer = raw.get("answer")
        if category == 5 or answer is None or not evidence or not set(evidence) <= present:
            continue
        questions.append(Question(f"locomo-qa-{sample}-{number}", str(raw.get("question", "")), str(answer),
                                  evidence, category))
    speakers = (str(data.get("speaker_a", "A")), str(data.get("speaker_b", "B")))
    return Conversation(conversation_id, sample, speakers, turns, questions, indexes)
