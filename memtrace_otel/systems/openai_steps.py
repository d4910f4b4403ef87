"""OpenAI-compatible implementations of the LLM steps, through the ``openai`` client.

Endpoint, model and key come from ``MEMTRACE_OPENAI_BASE_URL`` /
``MEMTRACE_OPENAI_MODEL`` / ``MEMTRACE_OPENAI_API_KEY`` (falling back to the
``OPENAI_*`` variables) or from arguments. Token usage is reported so the
systems put it on their spans. Embedding and the Mem0-style update decision
stay offline (rules, wordllama): the steps here are the ones whose quality a
model changes most.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

from memtrace_otel.config import ENV_OPENAI_API_KEY, ENV_OPENAI_BASE_URL, ENV_OPENAI_MODEL
from memtrace_otel.systems.interfaces import AnswerResult, Components, ContextItem, Sentence, Verdict
from memtrace_otel.systems.locomo import Turn
from memtrace_otel.systems.offline import default_embedder

__all__ = ["OpenAIAnswerer", "OpenAIExtractor", "OpenAIJudge", "OpenAIStep", "openai_components"]

_JSON = re.compile(r"\{.*\}|\[.*\]", re.S)


class OpenAIStep:
    """One chat call with usage accounting; the client is created once per step object."""

    def __init__(self, *, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, client: Any | None = None) -> None:
        self.model = model or os.environ.get(ENV_OPENAI_MODEL) or "gpt-4o-mini"
        if client is None:
            from openai import OpenAI

            client = OpenAI(base_url=base_url or os.environ.get(ENV_OPENAI_BASE_URL)
                            or os.environ.get("OPENAI_BASE_URL"),
                            api_key=api_key or os.environ.get(ENV_OPENAI_API_KEY)
                            or os.environ.get("OPENAI_API_KEY") or "unset")
        self.client = client

    def chat(self, system: str, user: str) -> tuple[str, int, int]:
        response = self.client.chat.completions.create(
            model=self.model, temperature=0,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        usage = getattr(response, "usage", None)
        text = response.choices[0].message.content or ""
        return (text.strip(), getattr(usage, "prompt_tokens", 0) or 0,
                getattr(usage, "completion_tokens", 0) or 0)


def _parse_json(text: str) -> Any:
    match = _JSON.search(text)
    if match is None:
        return None
    try:
        return json.loads(match.group(0))
    except json.JSONDecodeError:
        return None


class OpenAIAnswerer(OpenAIStep):
    """Answers from the retrieved memories only, in a few words."""

    prompt = ("Answer the question from the memories only, in as few words as possible. "
              "If they do not say, answer \"I don't know\".")

    def answer(self, question: str, context: Sequence[ContextItem]) -> AnswerResult:
        memories = "\n\n".join(item.render() for item in context)
        text, used_in, used_out = self.chat(self.prompt, f"Memories:\n{memories}\n\nQuestion: {question}")
        return AnswerResult(text or "I don't know.", input_tokens=used_in, output_tokens=used_out)


class OpenAIJudge(OpenAIStep):
    """An LLM judge: ``{"correct": true|false, "reason": "..."}``; unparsable means fail."""

    prompt = ("You grade an answer against the gold answer. Reply with JSON "
              "{\"correct\": true or false, \"reason\": \"...\"}. Be lenient on wording, strict on facts.")

    def judge(self, question: str, prediction: str, gold: str) -> Verdict:
        text, used_in, used_out = self.chat(
            self.prompt, f"Question: {question}\nGold: {gold}\nAnswer: {prediction}")
        parsed = _parse_json(text)
        passed = bool(isinstance(parsed, dict) and parsed.get("correct") is True)
        reason = str(parsed.get("reason", "")) if isinstance(parsed, dict) else f"unparsable: {text[:80]}"
        return Verdict(passed, 1.0 if passed else 0.0, reason, used_in, used_out)


class OpenAIExtractor(OpenAIStep):
    """Fact extraction: a JSON list of short fact sentences from one message."""

    prompt = ("Extract the facts worth remembering about the speaker from this chat message. "
              "Reply with a JSON list of short sentences; [] if none.")

    def extract(self, turn: Turn) -> list[Sentence]:
        text, _, _ = self.chat(self.prompt, f"{turn.speaker} ({turn.date}): {turn.text}")
        parsed = _parse_json(text)
        if not isinstance(parsed, list):
            return []
        return [Sentence(turn.dia_id, turn.speaker, turn.date, str(f)) for f in parsed if str(f).strip()]


def openai_components(**options: Any) -> Components:
    """Answerer, judge and extractor through an OpenAI-compatible endpoint; offline embedder."""
    embedder = default_embedder()
    answerer, judge, extractor = OpenAIAnswerer(**options), OpenAIJudge(**options), OpenAIExtractor(**options)
    return Components(answerer, judge, extractor, embedder,
                      {"answerer": f"openai:{answerer.model}", "judge": f"openai:{answerer.model}",
                       "extractor": f"openai:{answerer.model}", "embedder": embedder.name})
