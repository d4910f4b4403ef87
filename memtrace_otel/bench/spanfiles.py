"""Writing span records as OTLP/JSON Lines (gzip level 1: the benchmark writes many files)."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Sequence

from memtrace_otel.exporters import encode_traces_data
from memtrace_otel.spans.model import SpanRecord

__all__ = ["write_span_file"]

_SPANS_PER_LINE = 500


def write_span_file(path: str, records: Sequence[SpanRecord]) -> None:
    """Write ``records`` to ``path`` as OTLP/JSON lines, one ``TracesData`` per 500 spans."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    options = {"compresslevel": 1} if path.endswith(".gz") else {}
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8", **options) as out:  # type: ignore[operator]
        for start in range(0, len(records), _SPANS_PER_LINE):
            chunk = records[start:start + _SPANS_PER_LINE]
            out.write(json.dumps(encode_traces_data(chunk), separators=(",", ":")) + "\n")
