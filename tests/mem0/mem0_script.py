"""Scripted LLM replies for mem0's ``add``, per generation (what the local server answers).

1.x asks twice per ``add`` (facts, then one ADD/UPDATE/DELETE/NONE decision per memory);
2.x once (new memories only). Decision ids are mem0's own temporary ids: ``"0"`` is the
first existing memory its search found.
"""

from __future__ import annotations

from typing import Any

from memtrace_otel.instrument.mem0 import mem0_generation

from openai_server import Reply

__all__ = ["add_replies", "decision"]


def decision(event: str, text: str, record: str | None = None, old: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"id": record or "new", "text": text, "event": event}
    if old is not None:
        item["old_memory"] = old
    return item


def add_replies(facts: list[str], decisions: list[dict[str, Any]] | None = None) -> list[Reply]:
    """What the LLM answers to one ``add``: the facts, and on 1.x the decisions (ADD each by default)."""
    if mem0_generation() >= 2:
        return [Reply.json({"memory": [{"text": f, "attributed_to": "user"} for f in facts]})]
    chosen = decisions if decisions is not None else [decision("ADD", f) for f in facts]
    replies = [Reply.json({"facts": facts})]
    return [*replies, Reply.json({"memory": chosen})] if facts else replies
