"""Switch OpenTelemetry instrumentation off around memtrace's own work.

The extension never traces itself: LLM calls of the engines, the write-back
worker, the service's attribution and the annotation exports all run inside
:func:`suppress_instrumentation`, so an instrumented HTTP or OpenAI client in
the same process does not record them as application spans.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context

__all__ = ["suppress_instrumentation"]

try:  # the contrib helper also suppresses HTTP instrumentation; prefer it when installed
    from opentelemetry.instrumentation.utils import (  # type: ignore[import-not-found]
        suppress_instrumentation as _contrib_suppress,
    )
except ImportError:  # pragma: no cover - depends on the environment
    _contrib_suppress = None  # type: ignore[assignment]

_SUPPRESS_KEY: Any = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", "suppress_instrumentation")
_SUPPRESS_HTTP_KEY: Any = getattr(
    otel_context, "_SUPPRESS_HTTP_INSTRUMENTATION_KEY", "suppress_http_instrumentation"
)


@contextlib.contextmanager
def suppress_instrumentation() -> Iterator[None]:
    """Run the block with OpenTelemetry instrumentation switched off in this context.

    >>> with suppress_instrumentation():
    ...     bool(otel_context.get_value(_SUPPRESS_KEY))
    True
    """
    if _contrib_suppress is not None:
        with _contrib_suppress():
            yield
        return
    ctx = otel_context.set_value(_SUPPRESS_KEY, True)
    ctx = otel_context.set_value(_SUPPRESS_HTTP_KEY, True, ctx)
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)
