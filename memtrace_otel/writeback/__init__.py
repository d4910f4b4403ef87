"""Write-back: attribution verdicts as spans in the traces they explain.

:class:`AttributionSpanProcessor` attributes failures inside the application,
beside its exporter; :mod:`~memtrace_otel.writeback.annotations` holds the
span format both it and ``memtrace serve`` write (``docs/conventions.md``,
"Write-back spans").
"""

from memtrace_otel.writeback.annotations import (
    annotation_attributes,
    root_cause_context,
    write_annotations,
    write_attribution_span,
    write_root_cause_span,
)
from memtrace_otel.writeback.processor import AttributionSpanProcessor

__all__ = [
    "AttributionSpanProcessor",
    "annotation_attributes",
    "root_cause_context",
    "write_annotations",
    "write_attribution_span",
    "write_root_cause_span",
]
