"""mem0ai 2.x: ``add`` is additive, one extraction call and a batch insert.

``add`` searches existing memories once (they are shown to the LLM so it does not
repeat them), one LLM call answers ``{"memory": [{"text", "attributed_to"}]}``, new
texts are de-duplicated by hash and inserted in one batch (traced as one
``create_memory`` child), then linked to entities in a separate entity store (not
traced: it holds no memory text). Records change only through explicit ``update``,
``delete`` and ``delete_all``, which still call ``_update_memory`` / ``_delete_memory``.
"""

from __future__ import annotations

from typing import Any

from memtrace_otel.instrument.mem0.pipeline import LlmCallSpec, lines_of, parse_json_object
from memtrace_otel.semconv import Category

__all__ = ["METHODS", "PROPAGATE_CONTEXT", "llm_call_specs", "parse_memories"]

METHODS = ("add", "search", "get", "get_all", "history", "update", "delete", "delete_all",
           "_create_memory", "_update_memory", "_delete_memory")
PROPAGATE_CONTEXT = False


def parse_memories(response: Any) -> list[str]:
    """The new memories of the extraction call.

    >>> parse_memories('{"memory": [{"text": "Lives in Lisbon", "attributed_to": "user"}]}')
    ['Lives in Lisbon']
    """
    return lines_of(parse_json_object(response).get("memory"))


def llm_call_specs() -> tuple[LlmCallSpec, ...]:
    return (LlmCallSpec("mem0.add.extract", Category.EXTRACTION, "mem0.facts", parse_memories,
                    reads_retrieved=True),)
