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
    gz = path.endswith(".gz")
    with (gzip.open(path, "wt", encoding="utf-8", compresslevel=1) if gz
          else open(path, "w", encoding="utf-8")) as out:
        for start in range(0, len(records), _SPANS_PER_LINE):
            chunk = records[start:start + _SPANS_PER_LINE]
            out.write(json.dumps(encode_traces_data(chunk), separators=(",", ":")) + "\n")
