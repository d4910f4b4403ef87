"""Where the mem0 instrumentor's CPU goes inside one traced ``Memory.add`` / ``Memory.search``.

The same offline mem0 as ``mem0_overhead.py`` (its local LLM server and configuration), traced,
with the instrumentation's own entry points timed in the thread that runs them
(``time.thread_time``): the start and end of each traced call (``Call.start`` / ``Call.stop``) and,
inside them, the operation's span start and end, the lineage flush, step events, links, and each
spec's ``begin`` / ``end``. Nested parts are included in their callers. A measured part also pays
its timer (about a microsecond a call), so the figures are upper bounds; what they rank is where the
instrumentation's own time goes, which the paired end-to-end figures of ``mem0_overhead.py`` cannot
say. Run it in a venv with mem0ai (``.ci/install-mem0-venvs.sh``):

    ~/.cache/memtrace/venvs/mem0ai-1.0.11/bin/python benchmarks/performance/mem0_add_breakdown.py

``--top-level --json --checkout DIR`` gives only the instrumentation's total per call (three
timers) of the checkout ``DIR``, to compare two codes in alternation. Those timers are the generic
path's (``Call.start`` / ``Call.stop``, the store hooks): a stage that does not open a ``Call``
(``flat.py``) is not in them. ``--wrappers`` measures any code alike: every ``wrapt`` wrapper the
instrumentor installs is timed, less the time of the call it wraps (itself timed), so the total is
the instrumentation's own thread CPU whatever path it takes, the wrappers' dispatch included.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mem0_overhead as bench
from mem0_app import config
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import memtrace_otel
from memtrace_otel.instrument import operation
from memtrace_otel.instrument.mem0 import Mem0Instrumentor, hooks, lifecycle, methods, pipeline

try:  # the stages as events (absent from a checkout before them, which this script also measures)
    from memtrace_otel.instrument.mem0 import stages
except ImportError:  # pragma: no cover
    stages = None
try:  # the flat stages (absent before them)
    from memtrace_otel.instrument.mem0 import flat
except ImportError:  # pragma: no cover
    flat = None
try:  # the packed add and search, one span each (absent before them; the default path since)
    from memtrace_otel.instrument.mem0 import packed, packed_search
except ImportError:  # pragma: no cover
    packed = packed_search = None

from openai_server import ScriptedOpenAIServer

_spent: collections.Counter[str] = collections.Counter()


def _timed(owner: Any, name: str, label: str) -> None:
    function = owner.__dict__[name]
    if isinstance(function, classmethod):
        inner = function.__func__

        def timed_class(cls: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return inner(cls, *args, **kwargs)
            finally:
                _spent[label] += time.thread_time() - start

        setattr(owner, name, classmethod(timed_class))
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            _spent[label] += time.thread_time() - start

    setattr(owner, name, timed)


def _install_wrappers() -> None:
    """Time every wrapper the instrumentor installs, less the call it wraps: its own CPU alone."""
    import wrapt

    install = wrapt.wrap_function_wrapper

    def timed_install(owner: Any, name: str, wrapper: Any) -> Any:
        label = f"{getattr(owner, '__name__', owner)}.{name}"

        def timed_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
            inner = [0.0]

            def timed_wrapped(*a: Any, **k: Any) -> Any:
                start = time.thread_time()
                try:
                    return wrapped(*a, **k)
                finally:
                    inner[0] += time.thread_time() - start

            start = time.thread_time()
            try:
                return wrapper(timed_wrapped, instance, args, kwargs)
            finally:
                _spent[label] += time.thread_time() - start - inner[0]

        return install(owner, name, timed_wrapper)

    # The instrumentor and its hooks call ``wrapt.wrap_function_wrapper`` through the module.
    # (Their ``uninstrument`` then no longer finds its own layers: this process ends after.)
    wrapt.wrap_function_wrapper = timed_install


def _install_sdk() -> None:
    """Time the SDK calls an instrumentation makes (span start and end, attributes, events, links):
    within the wrappers' total, what the emission costs; the rest is the instrumentation's own work."""
    from opentelemetry.sdk import trace as sdk_trace

    for owner, names in ((sdk_trace.Tracer, ("start_span",)),
                         (sdk_trace.Span, ("end", "add_event", "add_link", "set_attribute", "set_attributes",
                                           "set_status", "record_exception"))):
        for name in names:
            _timed(owner, name, SDK)


def _install(top_level: bool = False) -> None:
    _timed(lifecycle.Call, "start", "Call.start (open, span start, begin)")
    _timed(lifecycle.Call, "stop", "Call.stop (end, flush, span end)")
    _timed(hooks, "_guarded", "store hooks (record writes)")
    if top_level:  # the instrumentation's whole time, with the fewest timers (each costs its own)
        return
    _timed(operation.Operation, "__enter__", "  span start + context")
    _timed(operation.Operation, "__exit__", "  span end (incl. flush)")
    _timed(operation, "_record_lineage", "    lineage attributes")  # a function: __exit__ calls it
    if stages is not None:
        _timed(stages.StageOperation, "__enter__", "  stage start (no span)")
        _timed(stages.StageOperation, "__exit__", "  stage end (incl. flush, its memtrace.stage event)")
    _timed(operation.Operation, "step", "  memtrace.step events")
    _timed(lifecycle.MethodSpec, "open", "  spec.open (operation, scope)")
    if flat is not None:
        _timed(flat.FlatStage, "__init__", "  flat stage start (no Call, no scope)")
        _timed(flat.FlatStage, "finish", "  flat stage end (its memtrace.stage event)")
        for function in ("_llm_begin", "_llm_end", "_search_end"):
            _timed(flat, function, f"  flat {function}")
    if packed is not None and packed_search is not None:
        # The packed wrappers are closures made at instrument time; the module functions they call
        # by name are what can be timed: the add's start and its ends. (The store and LLM steps'
        # recorders run the wrapped call inside them: only --wrappers separates their own part.)
        _timed(packed.PackedAdd, "__init__", "  packed add start (its facts object)")
        for function in ("_messages", "_end"):
            _timed(packed, function, f"  packed add {function}")
        for function in ("_end", "_facts"):
            _timed(packed_search, function, f"  packed search {function}")
    for spec in (methods.AddSpec, methods.SearchSpec, methods.CreateSpec, pipeline.ExistingSearchSpec,
                 pipeline.LlmCallSpec):
        for stage in ("begin", "end"):
            if stage in spec.__dict__:
                _timed(spec, stage, f"  {spec.__name__}.{stage}")


SDK = "of which SDK calls (span, attributes, events, links)"


def measure(calls: int, top_level: bool = False, wrappers: bool = False,
            sdk: bool = False) -> dict[str, dict[str, float]]:
    if wrappers:
        _install_wrappers()
        if sdk:
            _install_sdk()
    else:
        _install(top_level)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(bench._Discard()))
    instrumentor, counter = Mem0Instrumentor(), iter(range(10**9))
    scope = ({"user_id": "u", "limit": 10} if bench.mem0_generation() == 1
             else {"filters": {"user_id": "u"}, "top_k": 10})
    result: dict[str, dict[str, float]] = {}
    with ScriptedOpenAIServer(bench._llm) as server, tempfile.TemporaryDirectory() as data:
        from mem0 import Memory

        memory = Memory.from_config(config(server.base_url, data))
        instrumentor.instrument(tracer_provider=provider)
        methods_: dict[str, Callable[[], Any]] = {
            "add": lambda: memory.add(f"I note item {next(counter)} today.", user_id="u"),
            "search": lambda: memory.search(f"What item number {next(counter)}?", **scope)}
        for _ in range(20):
            methods_["add"]()
        for name, call in methods_.items():
            call()
            _spent.clear()
            for _ in range(calls):
                call()
            result[name] = {label: seconds / calls * 1e6 for label, seconds in _spent.items()}
        instrumentor.uninstrument()
    provider.shutdown()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--checkout", help="the memtrace checkout to import (read by mem0_overhead.py)")
    parser.add_argument("--top-level", action="store_true",
                        help="only the top-level timers: the instrumentation's total per call")
    parser.add_argument("--wrappers", action="store_true",
                        help="the total as every wrapper's time less the call it wraps (any code path)")
    parser.add_argument("--sdk", action="store_true",
                        help="--wrappers: the SDK calls' part of the total too (the rest: memtrace's own)")
    args = parser.parse_args()
    result = measure(args.calls, args.top_level, args.wrappers, args.sdk)
    if args.top_level or args.wrappers:
        result = {name: {"total": sum(v for k, v in parts.items() if k != SDK), **parts}
                  for name, parts in result.items()}
        for parts in result.values():
            if SDK in parts:
                parts["memtrace's own (total less SDK calls)"] = parts["total"] - parts[SDK]
        result["checkout"] = {os.path.dirname(os.path.dirname(memtrace_otel.__file__)): 0.0}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if not any(result.values()):
        # Timers on a path this code does not take measure nothing: say so rather than print empty lists.
        print("mem0_add_breakdown: none of the named timers ran on this code's path; "
              "use --wrappers (it times whatever path the instrumentor takes)", file=sys.stderr)
        return 1
    for name, parts in result.items():
        print(f"Memory.{name}: thread CPU in the instrumentation per call, {args.calls} calls")
        for label, micros in sorted(parts.items(), key=lambda item: -item[1]):
            print(f"  {label:42} {micros:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
