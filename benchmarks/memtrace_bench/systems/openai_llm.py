"""OpenAI-compatible LLM components (answerer, judge, extractor, decider), through the one client.

:class:`~memtrace_otel.llm_client.LLMClient` gives every component the same
configuration (``MEMTRACE_OPENAI_BASE_URL`` / ``MEMTRACE_OPENAI_MODEL`` /
``MEMTRACE_OPENAI_API_KEY``, falling back to the ``OPENAI_*`` variables),
timeouts, retries with backoff, JSON-output parsing (a malformed reply is
shown back to the model and asked again) and token accounting, with
instrumentation suppressed around its calls. Every result names the model and
provider and reports the token usage, which the systems put on their spans
(``op.record_llm_call``). Embedding stays offline (wordllama).

When the endpoint cannot be reached, a component raises
:class:`~memtrace_otel.llm_client.LLMError` (one line). When every attempt got
a reply but none in the asked shape, the component degrades as its docstring says
(a failed verdict, no facts, an ADD) and logs one warning.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from memtrace_bench.locomo import Turn
from memtrace_bench.systems.interfaces import (
    AnswerResult,
    Components,
    ContextItem,
    Decision,
    Extraction,
    MemoryEvent,
    Sentence,
    SimilarMemory,
    Verdict,
)
from memtrace_bench.systems.offline import default_embedder
from memtrace_otel.llm_client import ChatResult, LLMClient, LLMError, MalformedOutput, parse_json_object
from memtrace_otel.text import content_tokens

__all__ = [
    "OpenAIAnswerer",
    "OpenAIDecider",
    "OpenAIExtractor",
    "OpenAIJudge",
    "OpenAIStep",
    "Remembered",
    "ground",
    "llm_components",
    "openai_components",
]

_logger = logging.getLogger(__name__)
T = TypeVar("T")


class OpenAIStep:
    """One LLM component over a shared :class:`LLMClient` (built from ``options`` when not given).

    Thread safety: as the client's (components keep no state of their own).
    """

    provider: ClassVar[str] = "openai"
    """``gen_ai.provider.name`` of the component's calls (the GenAI registry's value for OpenAI)."""

    def __init__(self, *, client: LLMClient | None = None, **options: Any) -> None:
        self.client = client if client is not None else LLMClient(**options)

    @property
    def model(self) -> str:
        return self.client.model

    def chat(self, system: str, user: str) -> tuple[str, int, int]:
        """Free text: ``(reply, input tokens, output tokens)``."""
        result = self.client.chat(_messages(system, user))
        return (result.content or "").strip(), result.input_tokens, result.output_tokens

    def chat_json(self, system: str, user: str,
                  parse: Callable[[dict[str, Any]], T]) -> tuple[T | None, str, int, int]:
        """A JSON object turned into ``T`` by ``parse`` (which raises :class:`MalformedOutput`).

        ``(value, problem, input tokens, output tokens)``: ``value`` is ``None`` and
        ``problem`` says why when every attempt's reply was malformed; a transport
        failure raises :class:`LLMError`.
        """
        replies: list[ChatResult] = []
        try:
            value = self.client.chat_parsed(_messages(system, user),
                                            lambda result: parse(parse_json_object(result.content)),
                                            on_result=replies.append)
            problem = ""
        except LLMError as error:
            if len(replies) < self.client.attempts:
                raise  # not every attempt was answered: the endpoint, not the output, failed
            value, problem = None, error.reason
            _logger.warning("%s: %s", type(self).__name__, problem)
        return (value, problem, sum(r.input_tokens for r in replies),
                sum(r.output_tokens for r in replies))


def _messages(system: str, user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class OpenAIAnswerer(OpenAIStep):
    """Answers from the retrieved memories only, in a few words."""

    prompt = ("Answer the question from the memories only, in as few words as possible. "
              "If they do not say, answer \"I don't know\".")

    def answer(self, question: str, context: Sequence[ContextItem]) -> AnswerResult:
        memories = "\n\n".join(item.render() for item in context)
        text, used_in, used_out = self.chat(self.prompt, f"Memories:\n{memories}\n\nQuestion: {question}")
        source, unit = ground(text, context)
        return AnswerResult(text or "I don't know.", source, unit, input_tokens=used_in,
                            output_tokens=used_out, model=self.model, provider=self.provider)


def ground(answer: str, context: Sequence[ContextItem]) -> tuple[Sentence | None, str | None]:
    """The context sentence (and its unit) sharing most content words with ``answer`` (its date
    and speaker count as its words; the first among equals), or ``(None, None)`` when none shares one.

    A model does not say which memory it read; the benchmark needs it to aim faults at it.

    >>> s = Sentence("D1:2", "Ann", "8 May 2023", "I adopted a dog named Rex.")
    >>> ground("Rex", [ContextItem("mem:1", [s])])[1], ground("I don't know", [ContextItem("mem:1", [s])])
    ('mem:1', (None, None))
    """
    wanted = set(content_tokens(answer))
    best: tuple[int, Sentence | None, str | None] = (0, None, None)
    for item in context:
        for sentence in item.sentences:
            shared = len(wanted & set(content_tokens(f"{sentence.speaker} {sentence.date} {sentence.text}")))
            if shared > best[0]:
                best = (shared, sentence, item.unit)
    return best[1], best[2]


def _verdict(value: dict[str, Any]) -> tuple[bool, str]:
    correct = value.get("correct")
    if not isinstance(correct, bool):
        raise MalformedOutput('"correct" must be true or false')
    return correct, str(value.get("reason", ""))


class OpenAIJudge(OpenAIStep):
    """An LLM judge: ``{"correct": true|false, "reason": "..."}``; a malformed reply is a fail."""

    prompt = ("You grade an answer against the gold answer. Reply with JSON "
              "{\"correct\": true or false, \"reason\": \"...\"}. Be lenient on wording, strict on facts.")

    def judge(self, question: str, prediction: str, gold: str) -> Verdict:
        value, problem, used_in, used_out = self.chat_json(
            self.prompt, f"Question: {question}\nGold: {gold}\nAnswer: {prediction}", _verdict)
        if value is None:
            return Verdict(False, 0.0, f"unparsable verdict: {problem}", used_in, used_out,
                           self.model, self.provider)
        passed, reason = value
        return Verdict(passed, 1.0 if passed else 0.0, reason, used_in, used_out, self.model, self.provider)


def _facts(value: dict[str, Any]) -> list[str]:
    facts = value.get("facts")
    if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
        raise MalformedOutput('"facts" must be a list of strings')
    return [f.strip() for f in facts if f.strip()]


class OpenAIExtractor(OpenAIStep):
    """Fact extraction, as mem0's: ``{"facts": [short sentences]}`` from one message; malformed: none."""

    prompt = ("Extract the facts worth remembering about the speaker from this chat message. "
              "Reply with JSON {\"facts\": [\"short sentence\", ...]}; an empty list if none.")

    def extract(self, turn: Turn) -> Extraction:
        facts, _, used_in, used_out = self.chat_json(
            self.prompt, f"{turn.speaker} ({turn.date}): {turn.text}", _facts)
        return Extraction([Sentence(turn.dia_id, turn.speaker, turn.date, f) for f in facts or []],
                          used_in, used_out, self.model, self.provider)


class OpenAIDecider(OpenAIStep):
    """The update decision, modelled on mem0's update-memory prompt.

    The model sees the existing memories (as small integer ids, as mem0 does,
    so it cannot invent unit names) and the new fact, and answers
    ``{"event": "ADD"|"UPDATE"|"DELETE"|"NONE", "id": "<memory id>", "reason": "..."}``;
    ``id`` is required for UPDATE and DELETE. A malformed reply (after the
    client's retries) is an ADD: the fact is kept rather than lost.
    """

    prompt = (
        "You are a smart memory manager which controls the memory of a system. You can perform four "
        "operations: (1) ADD into the memory, (2) UPDATE the memory, (3) DELETE from the memory, and "
        "(4) NONE, no change. Compare the new fact with the existing memories and decide:\n"
        "- ADD: the fact is new information not present in any memory.\n"
        "- UPDATE: the fact adds to or refines the information of one memory (same topic); give its id.\n"
        "- DELETE: the fact contradicts one memory (it is no longer true); give its id.\n"
        "- NONE: the fact is already present in the memories.\n"
        "Reply with JSON only: {\"event\": \"ADD\" | \"UPDATE\" | \"DELETE\" | \"NONE\", "
        "\"id\": \"<id of the memory, for UPDATE and DELETE>\", \"reason\": \"...\"}."
    )

    def decide(self, fact: Sentence, similar: Sequence[SimilarMemory]) -> Decision:
        memories = [{"id": str(i), "text": m.render()} for i, m in enumerate(similar)]
        user = (f"Existing memories:\n{json.dumps(memories, ensure_ascii=False)}\n\n"
                f"New fact: {fact.text}")
        value, problem, used_in, used_out = self.chat_json(
            self.prompt, user, lambda reply: _decision(reply, similar))
        if value is None:
            reason = f"unparsable decision, added: {problem}"
            return Decision(MemoryEvent.ADD, None, reason, used_in, used_out, self.model, self.provider)
        event, target, reason = value
        return Decision(event, target, reason, used_in, used_out, self.model, self.provider)


def _decision(value: dict[str, Any], similar: Sequence[SimilarMemory]) -> tuple[MemoryEvent, str | None, str]:
    event = value.get("event")
    try:
        chosen = MemoryEvent(event.lower()) if isinstance(event, str) else None
    except ValueError:
        chosen = None
    if chosen is None:
        raise MalformedOutput('"event" must be one of ADD, UPDATE, DELETE, NONE')
    if chosen in (MemoryEvent.ADD, MemoryEvent.NONE):
        return chosen, None, str(value.get("reason", ""))
    ids = {str(i): m.unit for i, m in enumerate(similar)}
    memory_id = value.get("id")
    if str(memory_id) not in ids:
        raise MalformedOutput(f'{chosen.name} needs "id", one of: {", ".join(ids) or "(no memories)"}')
    return chosen, ids[str(memory_id)], str(value.get("reason", ""))


def openai_components(*, client: LLMClient | None = None, embedder: str = "auto",
                      **options: Any) -> Components:
    """Answerer, judge, extractor and update decider through one OpenAI-compatible client, and
    the offline embedder (``embedder``: ``auto``, ``wordllama`` or ``lexical``).

    ``options`` build the :class:`LLMClient` when ``client`` is not given.
    """
    client = client if client is not None else LLMClient(**options)
    chosen = default_embedder(embedder)
    made = (OpenAIAnswerer(client=client), OpenAIJudge(client=client), OpenAIExtractor(client=client),
             OpenAIDecider(client=client))
    name = f"openai:{client.model}"
    return Components(made[0], made[1], made[2], chosen, made[3],
                      {"answerer": name, "judge": name, "extractor": name, "decider": name,
                       "embedder": chosen.name})


class Remembered:
    """The LLM components of a :class:`Components`, each call remembered by its arguments.

    Fault and repair runs re-ingest and re-ask what the clean run did: with the
    remembered replies they see the very same model outputs (a sampled model
    would otherwise change more than the one perturbed operation) and cost no
    new calls. A reused result keeps the usage of the call that produced it.
    Thread safety: none (one per benchmark job process).
    """

    def __init__(self, components: Components) -> None:
        self._components = components
        self._memo: dict[tuple[Any, ...], Any] = {}
        self.calls = 0
        self.reused = 0

    def _call(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        if key in self._memo:
            self.reused += 1
        else:
            self.calls += 1
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[no-any-return]

    def answer(self, question: str, context: Sequence[ContextItem]) -> AnswerResult:
        key = ("answer", question, tuple((item.unit, tuple(item.sentences)) for item in context))
        return self._call(key, lambda: self._components.answerer.answer(question, context))

    def judge(self, question: str, prediction: str, gold: str) -> Verdict:
        return self._call(("judge", question, prediction, gold),
                          lambda: self._components.judge.judge(question, prediction, gold))

    def extract(self, turn: Turn) -> Extraction:
        return self._call(("extract", turn), lambda: self._components.extractor.extract(turn))

    def decide(self, fact: Sentence, similar: Sequence[SimilarMemory]) -> Decision:
        return self._call(("decide", fact, tuple(similar)),
                          lambda: self._components.decider.decide(fact, similar))


def llm_components(*, embedder: str = "auto", **options: Any) -> Components:
    """:func:`openai_components` for a benchmark build (``memtrace bench build --llm``): every LLM component
    through the configured endpoint, each call :class:`Remembered` for the fault and repair runs.

    The answers are copied (an :class:`AnswerResult` is mutable) so a caller cannot change a memo.
    """
    plain = openai_components(embedder=embedder, **options)
    memo = Remembered(plain)
    answerer = _CopiedAnswers(memo)
    return Components(answerer, memo, memo, plain.embedder, memo, dict(plain.description))


class _CopiedAnswers:
    def __init__(self, memo: Remembered) -> None:
        self._memo = memo

    def answer(self, question: str, context: Sequence[ContextItem]) -> AnswerResult:
        return copy.copy(self._memo.answer(question, context))
