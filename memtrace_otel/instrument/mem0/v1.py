"""mem0ai 1.x: ``add`` extracts facts, searches existing memories, then asks for decisions.

The pipeline the MemTrace paper studies: one LLM call extracts ``{"facts": [...]}``,
each fact searches the store, a second LLM call answers ``{"memory": [{"id", "text",
"event": ADD|UPDATE|DELETE|NONE, "old_memory"}]}``, and each decision runs
``_create_memory`` / ``_update_memory`` / ``_delete_memory``. ``add``, ``search`` and
``get_all`` run their work in a fresh thread pool, so the caller's context is carried
into it (``lifecycle.propagate_context``).
"""

from __future__ import annotations

from typing import Any

from memtrace_otel.instrument.mem0.pipeline import LlmCallSpec, lines_of, parse_json_object
from memtrace_otel.semconv import Category

__all__ = ["METHODS", "PROPAGATE_CONTEXT", "llm_call_specs", "parse_decisions", "parse_facts"]

METHODS = ("add", "search", "get", "get_all", "history", "update", "delete", "delete_all",
           "_create_memory", "_update_memory", "_delete_memory")
PROPAGATE_CONTEXT = True


def parse_facts(response: Any) -> list[str]:
    """The facts of the extraction call.

    >>> parse_facts('{"facts": ["Lives in Lisbon", "Has a dog"]}')
    ['Lives in Lisbon', 'Has a dog']
    """
    return lines_of(parse_json_object(response).get("facts"))


def parse_decisions(response: Any) -> list[str]:
    """The decisions of the update call, one line each: ``EVENT id: text``.

    >>> parse_decisions('{"memory": [{"id": "0", "text": "Lives in Porto", "event": "UPDATE"}]}')
    ['UPDATE 0: Lives in Porto']
    """
    decisions = parse_json_object(response).get("memory")
    lines = []
    for item in decisions if isinstance(decisions, list) else []:
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            lines.append(f"{item.get('event')} {item.get('id')}: {item['text']}")
    return lines


def llm_call_specs() -> tuple[LlmCallSpec, ...]:
    return (
        LlmCallSpec("mem0.add.extract", Category.EXTRACTION, "mem0.facts", parse_facts,
                    reads_retrieved=False),
        LlmCallSpec("mem0.add.decide", Category.UPDATE, "mem0.decisions", parse_decisions,
                    reads_retrieved=True),
    )
