"""Contents by reference: a content-addressed store outside the trace backend (issue 12).

With upload on, :class:`~memtrace_otel.instrument.MemoryTracer` writes variable
contents here (off the application thread) instead of onto spans, and spans carry
``memtrace.content_ref``; ``memtrace analyze / graph / serve --content-store`` read
them back. A low layer: it imports only the vocabulary (and ``fsspec``).
"""

from memtrace_otel.content.externalize import EVALUATION_TEXT_KEYS, externalize_contents, text_refs
from memtrace_otel.content.resolve import ContentResolver
from memtrace_otel.content.store import ContentStoreError, RefStore, is_digest, open_store
from memtrace_otel.content.upload import ContentUploader

__all__ = [
    "EVALUATION_TEXT_KEYS",
    "ContentResolver",
    "ContentStoreError",
    "ContentUploader",
    "RefStore",
    "externalize_contents",
    "is_digest",
    "open_store",
    "text_refs",
]
