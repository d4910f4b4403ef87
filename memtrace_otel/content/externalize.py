"""Move the contents of span records into a store, leaving references: spans as upload-on exports them.

For the benchmark's ``--content ref`` condition and for converting span files
captured with content into private ones. Works on any record with a mutable
``attributes`` dict (``SpanRecord``), so this module needs nothing above the spans
layer (whose packed mem0 readers say where a packed attribute keeps its texts).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping, Sequence
from typing import Any, Protocol, TypeVar

from memtrace_otel.content.store import RefStore, open_store
from memtrace_otel.semconv import CONTENT_KEYS, MemTrace
from memtrace_otel.spans.packed_add import PACKED_ADD, add_without_texts, decode_add, write_parts
from memtrace_otel.spans.packed_search import PACKED_SEARCH, decode_search_attributes, search_without_texts
from memtrace_otel.wire import MalformedId, content_hash, parse_descriptor

__all__ = ["EVALUATION_TEXT_KEYS", "externalize_contents", "text_refs"]

EVALUATION_TEXT_KEYS: dict[str, str] = {
    "question": MemTrace.EVALUATION_QUESTION, "prediction": MemTrace.EVALUATION_PREDICTION,
    "gold": MemTrace.EVALUATION_GOLD, "explanation": MemTrace.EVALUATION_EXPLANATION,
}
"""Evaluation text field (as in ``memtrace.evaluation.texts_ref``) -> its opt-in content key."""


class _Record(Protocol):
    # A read-only member (the dict itself is changed in place), so SpanRecord's dict[str, ...] matches.
    @property
    def attributes(self) -> MutableMapping[str, Any]: ...


S = TypeVar("S", bound=_Record)


def text_refs(texts: Iterable[tuple[str, str]]) -> list[str]:
    """``memtrace.evaluation.texts_ref`` elements for ``(field, text)`` pairs: ``"<field> <hash>"``.

    >>> text_refs([("gold", "hello")])
    ['gold a7b6eda801e5347d']
    """
    return [f"{field} {content_hash(text)}" for field, text in texts]


class _Writer:
    """Writes each text once per run (the store skips what it has across runs)."""

    def __init__(self, store: RefStore) -> None:
        self.store = store
        self.seen: set[str] = set()

    def __call__(self, digest: str, text: str) -> None:
        if digest not in self.seen:
            self.seen.add(digest)
            self.store.write(digest, text)


def _variables(attributes: MutableMapping[str, Any], write: _Writer) -> bool:
    contents = attributes.pop(MemTrace.VARIABLE_CONTENTS, None)
    descriptors = attributes.get(MemTrace.VARIABLES)
    if not isinstance(contents, Sequence) or not isinstance(descriptors, Sequence):
        return False
    for descriptor, text in zip(descriptors, contents, strict=False):
        if isinstance(text, str):
            try:
                # The text as the span holds it, under the descriptor's hash: a resolved graph
                # then sees exactly what a graph built with the contents on the spans sees.
                write(parse_descriptor(descriptor).hash, text)
            except (MalformedId, ValueError):
                continue  # the graph builder reports malformed descriptors
    return True


def _drop_parts(attributes: MutableMapping[str, Any], key: str) -> None:
    attributes.pop(key, None)
    part = 1
    while attributes.pop(f"{key}.{part}", None) is not None:
        part += 1


def _packed(attributes: MutableMapping[str, Any], write: _Writer, url: str) -> bool:
    """The captured texts of the packed mem0 ``add`` and ``search`` attributes, under the hashes their
    descriptors carry: each attribute re-encoded as an uploader without capture writes it."""
    moved = False
    for key, decode, without in ((PACKED_ADD, decode_add, add_without_texts),
                                 (PACKED_SEARCH, decode_search_attributes, search_without_texts)):
        packed, problem = decode(attributes)
        private = None
        if packed is not None:
            try:
                private, texts = without(packed, url)
            except (TypeError, ValueError, IndexError):
                problem = "malformed"
        if problem is not None:  # unreadable, so not provably free of text: dropped (privacy before a report)
            _drop_parts(attributes, key)
            continue
        if private is None:
            continue
        if private is not packed:  # captured: its texts (if any) move, its header names the store
            for digest, text in texts:
                write(digest, text)
            write_parts(attributes, key, private)
            moved = True
    return moved


def _evaluation(attributes: MutableMapping[str, Any], write: _Writer, keys: frozenset[str]) -> bool:
    texts = []
    for field, key in EVALUATION_TEXT_KEYS.items():
        text = attributes.pop(key, None) if key in keys else None
        if isinstance(text, str):
            texts.append((field, text))
            write(content_hash(text), text)
    if texts:
        attributes[MemTrace.EVALUATION_TEXTS_REF] = text_refs(texts)
    return bool(texts)


def externalize_contents(spans: Iterable[S], store: RefStore | str, *,
                         keys: Iterable[str] = CONTENT_KEYS) -> list[S]:
    """Move the contents of ``spans`` into ``store`` and leave references, in place.

    Of ``keys`` (default: every opt-in content key), ``memtrace.variable.contents``
    goes to the store under each descriptor's hash, as do the captured texts of the
    packed mem0 ``add`` and ``search`` attributes (re-encoded as an uploader without
    capture writes them: texts ``null``, the header's content ref the store's URL),
    and the evaluation texts under their own hashes (listed in
    ``memtrace.evaluation.texts_ref``); the other content keys are removed. A span
    that had contents moved gains ``memtrace.content_ref``.

    Parameters
    ----------
    spans:
        Records with a mutable ``attributes`` dict (``SpanRecord``); changed in place.
    store:
        The store, or its path or URL.
    keys:
        Which content keys to move or remove (e.g. only the variable contents, keeping
        the evaluation's own texts on the spans).

    Returns
    -------
    list
        The records, in order.

    Raises
    ------
    ContentStoreError
        ``store`` cannot name a store.
    OSError
        The store cannot be written.

    >>> from types import SimpleNamespace
    >>> span = SimpleNamespace(attributes={"memtrace.variables": ["fact 5 a7b6eda801e5347d f@1"],
    ...                                    "memtrace.variable.contents": ["hello"]})
    >>> [s.attributes for s in externalize_contents([span], "memory://externalize-doctest")]
    [{'memtrace.variables': ['fact 5 a7b6eda801e5347d f@1'], 'memtrace.content_ref': 'memory:///externalize-doctest'}]
    """
    target = store if isinstance(store, RefStore) else open_store(store)
    write, keys = _Writer(target), frozenset(keys)
    others = keys - {MemTrace.VARIABLE_CONTENTS, *EVALUATION_TEXT_KEYS.values()}
    records = list(spans)
    for span in records:
        a = span.attributes
        moved = MemTrace.VARIABLE_CONTENTS in keys and _variables(a, write)
        if MemTrace.VARIABLE_CONTENTS in keys:  # a packed span's texts are its variables' contents
            moved = _packed(a, write, target.url) or moved
        if not keys.isdisjoint(EVALUATION_TEXT_KEYS.values()):
            moved = _evaluation(a, write, keys) or moved
        for key in others.intersection(a):
            del a[key]
        for event in getattr(span, "events", ()):  # the evaluation event quotes the explanation
            for key in others.intersection(event.attributes):
                del event.attributes[key]
        if moved:
            a[MemTrace.CONTENT_REF] = target.url
    return records
