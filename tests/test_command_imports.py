"""Reading spans imports no instrumentation: the ``memtrace`` commands that read span files start
without ``wrapt``, the instrumentation, the content uploader's worker or the SDK's tracer (issue 28:
the commands' CPU is measured against the library's, which starts after its imports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_NOT_NEEDED = ("wrapt", "memtrace_otel.instrument", "memtrace_otel.content.upload",
               "memtrace_otel.batch_worker", "opentelemetry.sdk.trace", "opentelemetry.instrumentation")


def _imported_by(module: str) -> list[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         timeout=60)
    return json.loads(out.stdout)


@pytest.mark.parametrize("module", ["memtrace_otel.cli.graph_cmd", "memtrace_otel.cli.report_cmd",
                                    "memtrace_otel.cli.analyze_cmd", "memtrace_otel.spans.readers"])
def test_reading_spans_imports_no_instrumentation(module: str) -> None:
    modules = _imported_by(module)
    assert module in modules
    assert [m for m in modules if m.startswith(_NOT_NEEDED)] == []


def test_the_instrumentation_names_still_load_from_the_package() -> None:
    import memtrace_otel
    from memtrace_otel import MemoryTracer, current_operation
    from memtrace_otel.content import ContentUploader
    from memtrace_otel.instrument import MemoryTracer as Direct

    assert MemoryTracer is Direct and callable(current_operation)
    assert memtrace_otel.instrument.MemoryTracer is Direct
    assert ContentUploader.__module__ == "memtrace_otel.content.upload"
    with pytest.raises(AttributeError):
        memtrace_otel.no_such_name  # noqa: B018


def test_a_lineage_engine_starts_without_the_llm_engines() -> None:
    code = ("import json, sys; from memtrace_otel.attribution.base import available_engines, create_engine; "
            "create_engine('lineage'); before = sorted(sys.modules); names = available_engines(); "
            "print(json.dumps([before, names]))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         timeout=60)
    modules, names = json.loads(out.stdout)
    assert "memtrace_otel.attribution.lineage" in modules
    llm = ("memtrace_otel.attribution.llm_", "memtrace_otel.llm_client")
    assert not [m for m in modules if m.startswith(llm)]
    assert {"lineage", "llm-agent"} <= set(names)  # every engine is still listed when asked for
