"""A plain mem0 program (no tracing code) for the peers test, run under ``opentelemetry-instrument``.

``python peers_app.py LLM_URL DATA_DIR OUT_FILE``: adds two facts, changes one, searches, then writes
every span the auto-instrumentation's provider made to ``OUT_FILE`` (OTLP/JSON Lines) and, as JSON on
stdout, how many wrapper layers each patched ``Memory`` method carries and whose they are.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("MEM0_TELEMETRY", "False")

import wrapt
from mem0 import Memory
from mem0.memory import main as mem0_main
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mem0"))
from mem0_app import config, scope


def layers(function: object) -> list[str]:
    """The modules of the wrappers around ``function``, outermost first."""
    found = []
    while isinstance(function, (wrapt.FunctionWrapper, wrapt.ObjectProxy)):
        wrapper = getattr(function, "_self_wrapper", None)
        found.append(getattr(wrapper, "__module__", "?"))
        function = function.__wrapped__
    return found


def main() -> int:
    llm_url, data, out = sys.argv[1:4]
    provider = trace.get_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(out)))  # type: ignore[attr-defined]
    memory = Memory.from_config(config(llm_url, data))
    first = memory.add("I moved to Lisbon.", user_id="alice")["results"][0]["id"]
    memory.add("I have a dog called Pepper.", user_id="alice")
    memory.update(first, "Moved to Porto")
    memory.search("Where did the user move?", **scope(user_id="alice"))
    provider.force_flush()  # type: ignore[attr-defined]
    wrapped = {name: layers(mem0_main.Memory.__dict__[name]) for name in ("add", "search", "update")}
    print(json.dumps({"layers": wrapped, "record": first}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
