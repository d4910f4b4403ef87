"""A packed mem0 ``search`` (``memtrace.mem0.search``) read back as the span the generic shape made.

The mem0 instrumentor records a ``search`` as one span whose query, context and returned records are raw
facts in one compact JSON attribute (:mod:`memtrace_otel.instrument.mem0.packed_search`;
``docs/conventions.md``, "The packed mem0 ``search``"): no ``memtrace.inputs`` / ``outputs`` /
``variables``, no links. :func:`unpack_search` derives them as ``Operation`` would have recorded them for
the same call (``methods.SearchSpec``):

* ``memtrace.inputs``: the query (``query:<hash>@1``, an external input), then each returned record, in
  the order returned: the version its payload's lineage names, or ``mem0:<id>@1`` when it carries none
  (stored untraced);
* ``memtrace.outputs``: the context the search wrote (each retrieval's result is its own variable,
  ``methods.context_name``), at the version the writing process's registry gave it, which the
  instrumentor packed;
* ``memtrace.variables``: the descriptors of the query, of the records without a writer (the empty
  text's hash: the generic shape read them by name, without their text) and of the context;
* one link per writer of the returned records, each once, the search's own parent left out;
* with content capture, the contents and the GenAI query text and records the generic shape set. The
  instrumentor puts those two on the span too (for trace backends, which read no packed facts); derived
  here from the packed facts, they replace the span's own: the same values, read one way, whether the
  span was written before it carried them or its copies were cut by an attribute length limit (which
  the packed parts survive).

A malformed packed attribute is one problem; the span is then read without its lineage.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memtrace_otel.graph.attributes import report
from memtrace_otel.semconv import GenAI, MemTrace
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.packed_search import (
    PACKED_SEARCH,
    PACKED_SEARCH_FORMAT,
    decode_search,
    search_writer_links,
)
from memtrace_otel.wire import content_hash

__all__ = ["PACKED_SEARCH", "unpack_search"]

_UNTRACED = f"memory_unit 0 {content_hash('')} "


def unpack_search(span: SpanRecord, problems: list[Problem]) -> SpanRecord:
    """``span`` as the generic shape records it (its packed attribute and its parts left out)."""
    packed, wrong = decode_search(span)
    attributes = {k: v for k, v in span.attributes.items() if not k.startswith(PACKED_SEARCH)}
    if packed is None:
        report(problems, span, PACKED_SEARCH,
               f"{wrong or f'is not a packed search of format {PACKED_SEARCH_FORMAT}'}; "
               "the span is read without its lineage")
        return replace(span, attributes=attributes)
    try:
        attributes.update(_lineage(packed))  # over the span's own GenAI content keys, when it carries them
        links = search_writer_links(span, packed)
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        report(problems, span, PACKED_SEARCH, f"holds a malformed value ({type(exc).__name__}: {exc}); "
                                              "the span is read without its lineage")
        return replace(span, attributes={k: v for k, v in span.attributes.items()
                                         if not k.startswith(PACKED_SEARCH)})
    return replace(span, attributes=attributes, links=[*span.links, *links])


def _lineage(packed: list[Any]) -> dict[str, Any]:
    """The attributes ``_record_lineage`` (and ``record_retrieval``) wrote for the same search."""
    (limit, content_ref), query, context, records = packed[1], packed[2], packed[3], packed[4]
    capture = limit is not None
    inputs: list[str] = []
    descriptors: list[str] = []
    contents: list[str] = []
    attributes: dict[str, Any] = {}
    if query is not None:
        name, size, digest, text = query
        query_id = f"{name}@1"
        inputs.append(query_id)
        descriptors.append(f"query {int(size)} {digest} {query_id}")
        contents.append(text or "")
        if capture and type(text) is str and records is not None:  # record_retrieval: not on an error
            attributes[GenAI.MEMORY_QUERY_TEXT] = text
    found = []
    for item in records or ():  # none on an error: the generic shape recorded no retrieval then
        record_id, variable_id = str(item[0]), item[1]
        if type(variable_id) is str:
            inputs.append(variable_id)
        else:  # stored untraced: read by its name, version 1 (no writer), without its text
            variable_id = f"mem0:{record_id}@1"
            inputs.append(variable_id)
            descriptors.append(_UNTRACED + variable_id)
            contents.append("")
        if capture:
            found.append((variable_id, record_id, item[3], item[4]))
    if inputs:
        attributes[MemTrace.INPUTS] = inputs
    if context is not None:
        context_name, version, size, digest, text = context
        context_id = f"{context_name}@{int(version)}"
        attributes[MemTrace.OUTPUTS] = [context_id]
        descriptors.append(f"context {int(size)} {digest} {context_id}")
        contents.append(text or "")
    if descriptors:
        attributes[MemTrace.VARIABLES] = descriptors
        if capture:
            attributes[MemTrace.VARIABLE_CONTENTS] = contents
        if content_ref is not None:
            attributes[MemTrace.CONTENT_REF] = content_ref
    if capture and records is not None:  # SearchSpec.end: the retrieval's records, as record_retrieval
        attributes[GenAI.MEMORY_RECORDS] = _records_json(found, int(limit))
    return attributes


def _records_json(found: list[tuple[str, str, Any, Any]], limit: int) -> str:
    from memtrace_otel.instrument.genai import RetrievedRecord, retrieval_attributes
    from memtrace_otel.instrument.variables import Variable
    from memtrace_otel.semconv import VariableKind

    records = []
    for variable_id, record_id, text, score in found:
        name, _, version = variable_id.rpartition("@")
        records.append(RetrievedRecord(Variable(name, int(version), VariableKind.MEMORY_UNIT,
                                                text if type(text) is str else None), score, record_id))
    return str(retrieval_attributes(records, memory=True, capture=True, limit=limit)[GenAI.MEMORY_RECORDS])
