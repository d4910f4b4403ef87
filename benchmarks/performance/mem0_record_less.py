"""What recording less would save per mem0 ``add``: the instrumentation's own CPU, paired variants.

Issue 28, item 1 asks for a mem0 ``add`` at or below the leanest OTel peer; the passes of
``docs/performance-history.md`` found memtrace's own work per ``add`` spread thin, and asked what recording
less would buy. Each variant here takes one thing out of what a traced ``add`` records (or, for the
ceilings, everything a part records) by replacing one function of ``instrument/mem0/flat.py`` for a
block of calls. They are measurements, not modes: most of them drop what an engine reads (said in
``VARIANTS``), so a variant's saving is a ceiling, not an offer.

The measure is ``mem0_add_breakdown.py --wrappers``'s: thread CPU inside every wrapper the
instrumentor installs, less the call each wraps (the same offline mem0, one fact, on 1.x an ADD
decision, five existing records found). One process, one ``Memory``; each round runs a block of the
code as it is and a block of each variant, back to back, their order alternating between rounds; a
variant's figure is the median over the rounds of (variant − code as it is) per ``add``, so the load
of the machine, which moves whole blocks, mostly cancels. Each timed call also pays its timer, alike
in both arms. Run it in a venv with mem0ai (``.ci/install-mem0-venvs.sh``)::

    ~/.cache/memtrace/venvs/mem0ai-1.0.11/bin/python benchmarks/performance/mem0_record_less.py
    ~/.cache/memtrace/venvs/mem0ai-1.0.11/bin/python benchmarks/performance/mem0_record_less.py \\
        --variants own-hash --rounds 20 --json

``--base`` applies variants to both arms: with ``--base no-llm-search-stages`` the code "as it is"
is the ``add`` with its LLM and search stages off, and the remainder's variants (``no-lineage`` ...
``no-add-call``) each take one part of what is left, paired against it. Each arm also reports every
wrapper's own thread CPU per ``add`` (``parts_us``: the wrapped method's name), which splits the
remainder by where the instrumentor intercepts mem0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mem0_add_breakdown as breakdown
import mem0_overhead as bench
from mem0_app import config
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from memtrace_otel.instrument.mem0 import Mem0Instrumentor, flat, lifecycle, methods
from memtrace_otel.semconv import GenAI, MemTrace

from openai_server import ScriptedOpenAIServer

Patch = tuple[Any, str, Any]
"""(owner, attribute, replacement) for the variant's blocks."""


def _own_hashed() -> list[Patch]:
    own = flat.FlatStage._own

    def hashed(self: Any, name: str, content: str | None, kind: Any) -> Any:
        variable = own(self, name, content, kind)
        variable.descriptor = None  # described (and hashed) when the event is made, as before the fifth pass
        return variable

    return [(flat.FlatStage, "_own", hashed)]


def _no_prompt_text() -> list[Patch]:
    emit = flat.FlatStage.emit

    def without(self: Any) -> None:
        if self._llm is not None:
            self._llm = (self._llm[0], [], self._llm[2])  # the prompt variable made of no messages
        emit(self)

    return [(flat.FlatStage, "emit", without)]


def _no_reread() -> list[Patch]:
    begin = flat._llm_begin

    def without(stage: Any, spec: Any, add: Any, arguments: Any) -> None:
        retrieved, add.retrieved = add.retrieved, []
        try:
            begin(stage, spec, add, arguments)
        finally:
            add.retrieved = retrieved

    return [(flat, "_llm_begin", without)]


def _no_llm_genai() -> list[Patch]:
    return [(flat, "llm_call_attributes", lambda **_: {})]


def _no_events() -> list[Patch]:
    patches: list[Patch] = [(flat.FlatStage, "emit", lambda self: None)]
    if hasattr(flat, "FlatWrite"):  # the write stage's own kind since the sixth pass
        patches.append((flat.FlatWrite, "emit", lambda self: None))
    return patches


def _no_llm_search_stages() -> list[Patch]:
    return [(flat, "_add_scope", lambda instance, component: None)]


# The remainder: what an ``add`` costs with its LLM and search stages off (``--base
# no-llm-search-stages`` applies that to both arms of every round, so each variant below is one part
# of the remainder, paired against the remainder itself).

def _no_lineage() -> list[Patch]:
    def without(write: Any, context: Any, arguments: Any) -> None:
        # flat._write_records but for the two lineage keys it writes into each payload.
        ids, payloads = arguments.get("ids"), arguments.get("payloads")
        if not isinstance(ids, Sequence) or not isinstance(payloads, Sequence):
            return
        registry = write._owner.registry
        for record_id, payload in zip(ids, payloads, strict=False):
            if isinstance(payload, dict):
                data = payload.get("data")
                variable = registry.next_version(flat.record_name(record_id), flat._MEMORY_UNIT,
                                                 data if isinstance(data, str) else None, context)
                write.records.append((variable, str(record_id)))

    if not hasattr(flat, "FlatWrite"):  # the code before the sixth pass: the stage's own method
        return [(flat.FlatStage, "lineage_metadata", lambda self, variable, metadata: None)]
    return [(flat, "_write_records", without)]


def _no_records() -> list[Patch]:
    if not hasattr(flat, "FlatWrite"):  # before the sixth pass
        return [(flat, "write_records", lambda stage, arguments: None)]
    return [(flat, "_write_records", lambda write, context, arguments: None)]


def _no_write_stage() -> list[Patch]:
    return [(flat, "is_instrumentation_enabled", lambda: False)]  # the insert passes through


def _no_write_event() -> list[Patch]:
    if not hasattr(flat, "FlatWrite"):  # before the sixth pass: a FlatStage that is storing
        emit = flat.FlatStage.emit

        def without(self: Any) -> None:
            if not self.storing:
                emit(self)

        return [(flat.FlatStage, "emit", without)]
    return [(flat.FlatWrite, "emit", lambda self: None)]


class _NoEvent:
    """A span as a write stage's ``emit`` sees it, but for ``add_event``, which does nothing."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def __getattr__(self, name: str) -> Any:
        return getattr(self._span, name)

    def add_event(self, *args: Any, **kwargs: Any) -> None:
        """The event is built but not given to the SDK."""


def _no_write_sdk_event() -> list[Patch]:
    before = not hasattr(flat, "FlatWrite")
    owner = flat.FlatStage if before else flat.FlatWrite
    emit = owner.emit

    def without(self: Any) -> None:
        if before and not self.storing:
            emit(self)
            return
        host = self._host if before else self._add.op
        span, host.span = host.span, _NoEvent(host.span)
        try:
            emit(self)
        finally:
            host.span = span

    return [(owner, "emit", without)]


def _no_message() -> list[Patch]:
    return [(methods.AddSpec, "begin", lambda self, scope, arguments, parent: None)]


def _no_add_end() -> list[Patch]:
    return [(methods.AddSpec, "end", lambda self, scope, arguments, result: None)]


def _no_add_genai() -> list[Patch]:
    def bare(self: Any, tracer: Any, memory: Any, gen_ai: Any, arguments: Any) -> Any:
        return tracer.operation(self.name, self.category)  # the span's category and name only

    return [(methods.AddSpec, "_operation", bare)]


def _generic_add() -> list[Patch]:
    """The ``add`` span as before its lean start and end: its operation made by ``MemoryTracer.operation``
    each time, and its record count and outcome set in a call of their own (``AddSpec.end`` of cd871cd)."""

    def end(self: Any, scope: Any, arguments: Any, result: Any) -> None:
        items, op = methods.result_items(result), scope.op
        outcome = ",".join(sorted({str(i.get("event")) for i in items})) if items else "noop"
        if op.captures_content:
            op.record_memory(count=len(items), records=methods.stored_records(items))
            op.set_outcome(outcome)
        else:
            op.set_attributes({GenAI.MEMORY_RECORD_COUNT: len(items), MemTrace.OPERATION_OUTCOME: outcome})

    return [(methods.AddSpec, "_operation", lifecycle.MethodSpec._operation), (methods.AddSpec, "end", end)]


def _generic_search() -> list[Patch]:
    """The ``search`` span as before the seventh pass: its operation made by ``MemoryTracer.operation`` each
    time (for a paired before/after: the variant is the code before, drops nothing)."""
    return [(methods.SearchSpec, "_operation", lifecycle.MethodSpec._operation)]


class _SameContext:
    """``contextvars.copy_context()`` that copies nothing: mem0's workers run in their own context."""

    @staticmethod
    def copy_context() -> Any:
        return _SameContext

    @staticmethod
    def run(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)


def _no_scoped_writes() -> list[Patch]:
    # Without the add's scope its workers' writes would not know it: no write stage, and no
    # ``_create_memory`` traced as a call of its own (which it then would be).
    never = lambda self, instance, arguments, parent: False  # noqa: E731
    return [*_no_write_stage(), (methods.CreateSpec, "applies", never)]


def _no_context() -> list[Patch]:
    return [*_no_scoped_writes(), (lifecycle, "contextvars", _SameContext)]


def _no_scope() -> list[Patch]:
    return [*_no_scoped_writes(), (lifecycle, "set_scope", lambda scope: None)]


def _no_add_call() -> list[Patch]:
    # The add's wrapper binds its arguments and passes through: no span, scope, message, stages.
    return [(lifecycle.Call, "start", classmethod(lambda cls, tracer, spec, instance, arguments: None))]


VARIANTS: dict[str, tuple[Callable[[], list[Patch]], str]] = {
    "own-hash": (_own_hashed, "the LLM stages' own variables hashed again (the code before the fifth pass: "
                              "a positive figure is what not hashing them saves)"),
    "no-prompt-text": (_no_prompt_text, "no prompt text built or kept (the prompt's content: read by the "
                                        "steps and carrying rules)"),
    "no-reread": (_no_reread, "the decision stage not reading the records the search read (its input edges: "
                              "read by every engine)"),
    "no-llm-genai": (_no_llm_genai, "no gen_ai.request.model / gen_ai.provider.name on the LLM stage events "
                                    "(read by no engine; shown in trace viewers)"),
    "no-events": (_no_events, "ceiling: no stage event at all (events, links, own variables, descriptors)"),
    "no-llm-search-stages": (_no_llm_search_stages, "ceiling: the LLM and search stages not recorded at all "
                                                    "(their wrappers pass through)"),
    "no-lineage": (_no_lineage, "no registry/lineage written into the stored record's metadata (read by "
                                "the next add that finds the record: its producer link)"),
    "no-records": (_no_records, "the write stage without its record variables, their lineage and record "
                                "attributes (its event kept)"),
    "no-write-stage": (_no_write_stage, "no write stage at all (the insert's wrapper passes through)"),
    "no-write-event": (_no_write_event, "the write stage's records versioned and their lineage written, "
                                        "its memtrace.stage event not made (nor, since the sixth pass, the "
                                        "reads, contents and attributes it waits for)"),
    "no-write-sdk-event": (_no_write_sdk_event, "the write stage's event built but not given to the SDK "
                                                "(what the event on the wire costs: add_event alone)"),
    "no-message": (_no_message, "no message variable (nor its hash) on the add span"),
    "no-add-end": (_no_add_end, "no record count / outcome set on the add span at its end"),
    "no-add-genai": (_no_add_genai, "the add span started with its category and name only (no GenAI "
                                    "operation, store, provider, server)"),
    "generic-add": (_generic_add, "the add span made as before session 38's lean path (for a paired "
                                  "before/after: the variant is the code before, drops nothing)"),
    "generic-search": (_generic_search, "the search span made by MemoryTracer.operation each time (the code "
                                        "before the seventh pass; drops nothing)"),
    "no-scoped-writes": (_no_scoped_writes, "no write stage and no _create_memory call of its own (what "
                                            "no-context and no-scope also leave out)"),
    "no-context": (_no_context, "no context copied into mem0's workers (and no-scoped-writes)"),
    "no-scope": (_no_scope, "no scope made current for the add (and no-scoped-writes)"),
    "no-add-call": (_no_add_call, "the add's wrapper binds its arguments and passes through (no span, "
                                  "scope, message, write stage): what is left is the interception"),
}


def _apply(patches: list[Patch]) -> list[Patch]:
    undo = []
    for owner, name, value in patches:
        undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)
    return undo


def measure(variants: list[str], rounds: int, block: int, base: list[str] | None = None,
            sdk: bool = False) -> dict[str, Any]:
    breakdown._install_wrappers()
    if sdk:  # the SDK calls timed too: a part of its own, within the wrappers', so not in the totals
        breakdown._install_sdk()
    # ``base``: applied to both arms (the code "as it is" becomes the code with them).
    common = [patch for name in base or () for patch in VARIANTS[name][0]()]
    patches = {name: common + VARIANTS[name][0]() for name in variants}
    patches[""] = common
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(bench._Discard()))
    instrumentor, counter = Mem0Instrumentor(), iter(range(10**9))
    as_is_blocks: list[float] = []
    differences: dict[str, list[float]] = {name: [] for name in variants}
    parts: dict[str, list[dict[str, float]]] = {name: [] for name in ["", *variants]}
    """Per block, each wrapper's own thread CPU per add (its label: the wrapped method)."""
    with ScriptedOpenAIServer(bench._llm) as server, tempfile.TemporaryDirectory() as data:
        from mem0 import Memory

        memory = Memory.from_config(config(server.base_url, data))
        instrumentor.instrument(tracer_provider=provider)

        def add() -> None:
            memory.add(f"I note item {next(counter)} today.", user_id="u")

        def timed(variant: str) -> float:
            undo = _apply(patches[variant])
            try:
                add()  # the first call of a block warms the replaced code
                breakdown._spent.clear()
                for _ in range(block):
                    add()
                parts[variant].append({k: v / block * 1e6 for k, v in breakdown._spent.items()})
                return sum(v for k, v in breakdown._spent.items() if k != breakdown.SDK) / block * 1e6
            finally:
                _apply(undo)

        for _ in range(20):  # warm up, and give the searches records to find
            add()
        for r in range(rounds):
            for name in variants:
                if r % 2:
                    as_is = timed("")
                    changed = timed(name)
                else:
                    changed = timed(name)
                    as_is = timed("")
                as_is_blocks.append(as_is)
                differences[name].append(changed - as_is)
        instrumentor.uninstrument()
    provider.shutdown()
    return {"as_is_us": statistics.median(as_is_blocks), "blocks": len(as_is_blocks), "block": block,
            "base": base or [], "as_is_parts_us": _median_parts(parts[""]),
            "variants": {name: {"difference_us": statistics.median(d), "rounds_us": d,
                                "parts_us": _median_parts(parts[name]),
                                "what": VARIANTS[name][1]} for name, d in differences.items()}}


def _median_parts(blocks: list[dict[str, float]]) -> dict[str, float]:
    """Each wrapper's median over the blocks (a wrapper absent from a block spent nothing there)."""
    labels = sorted({label for block in blocks for label in block})
    return {label: statistics.median(block.get(label, 0.0) for block in blocks) for label in labels}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--base", default="",
                        help="comma-separated variants applied to both arms (e.g. no-llm-search-stages: each "
                             "variant is then a part of what remains)")
    parser.add_argument("--sdk", action="store_true",
                        help="also time the SDK calls (reported as a part, within the wrappers' time)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=20, help="traced adds per block")
    parser.add_argument("--checkout", help="the memtrace checkout to import (read by mem0_overhead.py)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    base = [v for v in args.base.split(",") if v]
    unknown = [v for v in variants + base if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    result = measure(variants, args.rounds, args.block, base, args.sdk)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"Memory.add: the instrumentation's own thread CPU, {result['as_is_us']:.0f} us per call "
              f"as it is{' with ' + ','.join(base) if base else ''} (median of {result['blocks']} blocks "
              f"of {result['block']})")
        for label, spent in result["as_is_parts_us"].items():
            print(f"    {label:40s} {spent:7.1f} us")
        for name, found in result["variants"].items():
            rounds = ", ".join(f"{d:+.0f}" for d in found["rounds_us"])
            print(f"  {name:22s} {found['difference_us']:+7.1f} us  ({rounds})\n      {found['what']}")
    sys.stdout.flush()
    os._exit(0)  # mem0's local qdrant client closes at exit and may fail then (the interpreter is going)


if __name__ == "__main__":
    raise SystemExit(main())
