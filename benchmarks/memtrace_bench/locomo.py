"""LoCoMo conversations: loading, and the few views the reference systems need.

The data stays where it is (``memtrace_bench.config.locomo_dir()``); nothing is
copied. Malformed entries (an evidence id such as ``D8:6; D9:17``) are split
or dropped, never fatal.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from memtrace_bench.config import locomo_dir
from memtrace_otel.text import short_date

__all__ = [
    "QA",
    "Conversation",
    "Session",
    "Turn",
    "check_conversation_id",
    "conversation_ids",
    "load_conversation",
]

_DIA = re.compile(r"D\d+:\d+")
# A conversation id names a file in the LoCoMo directory and a directory under the benchmark's
# output: a path ("/abs/x", "../x") would read and write elsewhere.
_PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True, slots=True)
class Turn:
    """One chat message; ``text`` includes the caption of a shared image."""

    dia_id: str
    speaker: str
    text: str
    session: int
    date: str


@dataclass(slots=True)
class Session:
    index: int
    date: str
    turns: list[Turn]


@dataclass(frozen=True, slots=True)
class QA:
    """One question. ``category``: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial."""

    index: int
    question: str
    answer: str
    evidence: tuple[str, ...]
    category: int


@dataclass(slots=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: list[Session]
    questions: list[QA] = field(default_factory=list)

    def turn(self, dia_id: str) -> Turn | None:
        for session in self.sessions:
            for turn in session.turns:
                if turn.dia_id == dia_id:
                    return turn
        return None

    def truncated(self, max_sessions: int) -> Conversation:
        """The first ``max_sessions`` sessions, with only the questions they can answer."""
        kept = self.sessions[:max_sessions]
        present = {t.dia_id for s in kept for t in s.turns}
        questions = [q for q in self.questions if q.evidence and set(q.evidence) <= present]
        return Conversation(self.sample_id, self.speakers, kept, questions)


def check_conversation_id(conversation_id: str) -> str:
    """``conversation_id`` itself when it is a plain name (letters, digits, ``-``, ``_``, ``.``).

    Raises ``ValueError`` otherwise: an id becomes a file name when reading
    and a directory name when writing, so a path must not pass.

    >>> check_conversation_id("26")
    '26'
    >>> check_conversation_id("../26")
    Traceback (most recent call last):
    ...
    ValueError: '../26' is not a plain conversation id (letters, digits, '-', '_', '.'; no path)
    """
    if not isinstance(conversation_id, str) or _PLAIN_ID.fullmatch(conversation_id) is None:
        raise ValueError(f"{conversation_id!r} is not a plain conversation id "
                         "(letters, digits, '-', '_', '.'; no path)")
    return conversation_id


def conversation_ids(directory: str | None = None) -> list[str]:
    """Ids (file stems) of the conversations in ``directory``, sorted."""
    directory = directory or locomo_dir()
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"LoCoMo directory not found: {directory}")
    return sorted(name[:-5] for name in os.listdir(directory) if name.endswith(".json"))


def _turn(raw: dict[str, object], session: int, date: str) -> Turn | None:
    dia_id, text = raw.get("dia_id"), raw.get("text")
    if not isinstance(dia_id, str) or not isinstance(text, str):
        return None
    caption = raw.get("blip_caption")
    if isinstance(caption, str) and caption:
        text = f"{text} [shares a photo of {caption}]"
    return Turn(dia_id, str(raw.get("speaker", "")), text, session, date)


def _sessions(data: dict[str, object]) -> list[Session]:
    found = []
    for key, value in data.items():
        match = _SESSION.fullmatch(key)
        if match is None or not isinstance(value, list) or not value:
            continue
        index = int(match.group(1))
        date = short_date(str(data.get(f"{key}_date_time", "")))
        turns = [t for t in (_turn(r, index, date) for r in value if isinstance(r, dict)) if t]
        found.append(Session(index, date, turns))
    return sorted(found, key=lambda s: s.index)


def _questions(data: dict[str, object]) -> list[QA]:
    questions = []
    listed = data.get("qa")
    for index, raw in enumerate(listed if isinstance(listed, list) else []):
        if not isinstance(raw, dict):
            continue
        answer = raw.get("answer", raw.get("adversarial_answer", ""))
        evidence = tuple(_DIA.findall(" ".join(str(e) for e in raw.get("evidence") or [])))
        questions.append(QA(index, str(raw.get("question", "")), str(answer), evidence,
                            int(raw.get("category", 0) or 0)))
    return questions


def read_conversation_file(conversation_id: str, directory: str | None = None) -> dict[str, object]:
    """The JSON object of conversation ``conversation_id``'s file, as stored (one read for every loader).

    Raises ``ValueError`` when the id is not a plain name (:func:`check_conversation_id`) or the
    file is not a JSON object, ``FileNotFoundError`` naming the directory or the file when absent.
    """
    base = directory or locomo_dir()
    path = os.path.join(base, f"{check_conversation_id(conversation_id)}.json")
    if not os.path.isdir(base):
        raise FileNotFoundError(f"LoCoMo directory not found: {base}")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise FileNotFoundError(f"LoCoMo conversation not found: {path}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def load_conversation(conversation_id: str, directory: str | None = None) -> Conversation:
    """Load conversation ``conversation_id`` (e.g. ``"26"``) from the LoCoMo directory.

    Raises as :func:`read_conversation_file` does.
    """
    return conversation_from_data(conversation_id, read_conversation_file(conversation_id, directory))


def conversation_from_data(conversation_id: str, data: dict[str, object]) -> Conversation:
    """The :class:`Conversation` of a file's JSON object (:func:`read_conversation_file`)."""
    speakers = (str(data.get("speaker_a", "A")), str(data.get("speaker_b", "B")))
    return Conversation(conversation_id, speakers, _sessions(data), _questions(data))
