"""Contents by reference: a content-addressed store outside the trace backend (issue 12).

With upload on, :class:`~memtrace_otel.instrument.MemoryTracer` writes variable
contents here (off the application thread) instead of onto spans, and spans carry
``memtrace.content_ref``; ``memtrace analyze / graph / serve --content-store`` read
them back. A low layer: it imports only the vocabulary (and ``fsspec``), and the spans
layer's packed mem0 readers (``externalize.py``: where a packed attribute keeps its texts).
"""

from typing import TYPE_CHECKING, Any

from memtrace_otel.content.externalize import EVALUATION_TEXT_KEYS, externalize_contents, text_refs
from memtrace_otel.content.resolve import ContentResolver
from memtrace_otel.content.store import ContentStoreError, RefStore, is_digest, open_store

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    # The uploader is the writing side (a worker thread, instrumentation suppression: wrapt and
    # opentelemetry-instrumentation); readers of contents (every ``memtrace`` command) never need
    # it, so it is imported on first use (PEP 562).
    if name == "ContentUploader":
        from memtrace_otel.content.upload import ContentUploader

        globals()[name] = ContentUploader
        return ContentUploader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
