"""Oracle operations for counterfactual repair: what "keeps the evidence" means, operation by operation.

A :class:`Repair` names the critical information of one question (``keys``: for
each evidence message, the sentence that best matches the question and its
gold answer) and the one operation to repair (``target``). The systems ask it
at each place where an operation can lose that information (an extraction
that drops a sentence, a decision that deletes or skips it, a trim that evicts
it, a retrieval that leaves it out, a generation that misreads it), record
every such loss (:class:`Loss`), and run the oracle version only at the target:
the fault injectors in reverse. A ``target`` of ``None`` only watches (the clean
run's audit).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from memtrace_bench.locomo import QA, Conversation
from memtrace_bench.systems.interfaces import Sentence
from memtrace_otel.semconv import ErrorType
from memtrace_otel.text import content_tokens, sentences

__all__ = ["Loss", "Repair", "key_sentences", "missing_keys", "verbatim_sentences"]


@dataclass(frozen=True, slots=True)
class Repair:
    """The critical information to keep, and which operation runs its oracle version.

    ``target``: an ingestion-side operation's ordinal (counted per system run
    from the first session, carried in snapshots), or a question-time
    operation's span name (``"rag.retrieve"``, ``"rag.generate"``); ``None``
    repairs nothing and only records losses. ``verbatim`` holds the
    ``(message id, sentence)`` pairs of the evidence messages: a fact that is
    none of them was rewritten (an LLM extractor's), and carries a key of its
    message by message id alone.
    """

    keys: tuple[Sentence, ...]
    target: int | str | None = None
    verbatim: frozenset[tuple[str, str]] = frozenset()

    def carries(self, sentence: Sentence, key: Sentence) -> bool:
        """Whether ``sentence`` holds the critical information ``key`` stands for.

        >>> k = Sentence("D1:2", "Ann", "1 May 2023", "I adopted Rex.")
        >>> r = Repair((k,), verbatim=frozenset({("D1:2", "I adopted Rex."), ("D1:2", "Yay!")}))
        >>> r.carries(k, k), r.carries(Sentence("D1:2", "Ann", "1 May 2023", "Yay!"), k)
        (True, False)
        >>> r.carries(Sentence("D1:2", "Ann", "1 May 2023", "Ann adopted a dog named Rex"), k)
        True
        """
        if sentence.dia_id != key.dia_id:
            return False
        return sentence.text == key.text or (sentence.dia_id, sentence.text) not in self.verbatim

    def held(self, kept: Iterable[Sentence]) -> list[Sentence]:
        """Keys that some sentence of ``kept`` carries."""
        kept = list(kept)
        return [k for k in self.keys if any(self.carries(s, k) for s in kept)]

    def lost(self, dia_ids: Iterable[str], kept: Sequence[Sentence]) -> list[Sentence]:
        """Keys of messages ``dia_ids`` that none of ``kept`` carries."""
        wanted = set(dia_ids)
        return [k for k in self.keys if k.dia_id in wanted and not any(self.carries(s, k) for s in kept)]


@dataclass(slots=True)
class Loss:
    """One operation of a run that lost critical information (``keys``).

    ``ordinal`` is the repair target that replays it (int for ingestion-side,
    the span name for question time), ``session`` the LoCoMo session index it
    ran in (``None`` at question time), ``span`` its trace id, span id and name.
    """

    ordinal: int | str
    error_type: ErrorType
    keys: tuple[Sentence, ...]
    session: int | None = None
    span: dict[str, str] = field(default_factory=dict)


def key_sentences(conversation: Conversation, qa: QA) -> tuple[Sentence, ...]:
    """The critical sentence of each evidence message of ``qa``: the one sharing most content words
    with the question and its gold answer (the first among equals)."""
    wanted = set(content_tokens(f"{qa.question} {qa.answer}"))
    keys = []
    for dia_id in dict.fromkeys(qa.evidence):
        turn = conversation.turn(dia_id)
        if turn is None:
            continue
        parts = sentences(turn.text) or [turn.text]
        best = max(parts, key=lambda text: (len(wanted & set(content_tokens(text))), -parts.index(text)))
        keys.append(Sentence(turn.dia_id, turn.speaker, turn.date, best))
    return tuple(keys)


def verbatim_sentences(conversation: Conversation, keys: Iterable[Sentence]) -> frozenset[tuple[str, str]]:
    """The ``(message id, sentence)`` pairs of the messages the ``keys`` come from."""
    pairs: set[tuple[str, str]] = set()
    for dia_id in {k.dia_id for k in keys}:
        turn = conversation.turn(dia_id)
        if turn is not None:
            pairs.update((dia_id, text) for text in sentences(turn.text))
    return frozenset(pairs)


def missing_keys(repair: Repair, held: Sequence[Sentence]) -> list[Sentence]:
    """The keys none of ``held`` carries (empty: a perfect reader of ``held`` could answer)."""
    return [k for k in repair.keys if not any(repair.carries(s, k) for s in held)]
