"""The SDK floor of a traced mem0 call: memtrace's span replayed through the bare OpenTelemetry SDK.

What a traced ``Memory.add`` costs has two parts: computing its lineage (the variables, their
versions and hashes, the records read, the writers to link) and emitting it (the SDK's span with its
attributes, one ``memtrace.stage`` event per stage, one link per writer). This module measures the
second alone, the way ``op_overhead.py``'s floor does for one traced operation: a memtrace run of
the benchmark's inputs is recorded (:class:`Capture`: each traced call's span as a JSON payload),
and :class:`FloorInstrumentor`, a second and minimal instrumentation of the same ``Memory`` methods,
emits for each traced call the next recorded payload of its method straight through the SDK: the
same name, kind, attributes, events (same keys, same joined values), links and status. No memtrace
code runs on its path (this module imports none); the payload's computation is not the floor's,
its emission is. The payload is turned into SDK objects (span contexts, attribute dictionaries)
when it is loaded, as an instrumentation would have them at hand; what the floor's call does is
what any instrumentation must: open a current span with its attributes and links, let mem0 run,
add the events, set the status, end the span.

The floor replays one span per traced call (memtrace's default shape: the stages are events of the
call's span); :class:`Capture` refuses a call that made more, so a change of memtrace's shape cannot
go unnoticed (``tests/mem0/test_mem0_floor.py`` runs one ``add`` both ways and compares the spans).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import FrameType
from typing import Any

import wrapt
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

MODULE, CLASS = "mem0.memory.main", "Memory"
METHODS = ("add", "search")
"""The calls the overhead benchmark times (sync ``Memory`` only: it makes no async calls)."""


def payload_of(span: ReadableSpan) -> dict[str, Any]:
    """One finished span as a JSON-able payload: everything the floor emits, no times or ids of its own."""
    return {
        "name": span.name,
        "kind": span.kind.name,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "links": [{"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}",
                   "trace_flags": int(link.context.trace_flags),
                   "trace_state": link.context.trace_state.to_header(),
                   "attributes": dict(link.attributes or {})} for link in span.links],
        "status": {"code": span.status.status_code.name, "description": span.status.description},
    }


class Capture(SpanProcessor):
    """Records each traced call's span as a payload, by method, in the order the calls ran.

    ``method`` is set by the caller before each call; spans end inside the call, on its thread or
    mem0's (``on_end`` runs wherever ``end()`` is called), so the processor keys them by the method
    current when they end. A call that makes more than one span is refused when the payloads are
    taken (the floor replays one span per call)."""

    def __init__(self) -> None:
        self.method: str | None = None
        self._spans: dict[str, list[tuple[int, ReadableSpan]]] = defaultdict(list)
        self._call = 0

    def begin(self, method: str) -> None:
        """The next call's method: its spans are grouped apart from the previous call's."""
        self.method, self._call = method, self._call + 1

    def on_end(self, span: ReadableSpan) -> None:
        if self.method is not None:
            self._spans[self.method].append((self._call, span))

    def payloads(self) -> dict[str, list[dict[str, Any]]]:
        result: dict[str, list[dict[str, Any]]] = {}
        for method, spans in sorted(self._spans.items()):
            per_call: dict[int, list[ReadableSpan]] = defaultdict(list)
            for call, span in spans:
                per_call[call].append(span)
            many = [len(s) for s in per_call.values() if len(s) != 1]
            if many:
                names = sorted({s.name for group in per_call.values() if len(group) != 1 for s in group})
                raise SystemExit(f"mem0_floor: a traced Memory.{method} made {many[0]} spans "
                                 f"({', '.join(names)}); the floor replays one span per call")
            result[method] = [payload_of(per_call[call][0]) for call in sorted(per_call)]
        return result


def save(payloads: Mapping[str, Sequence[Mapping[str, Any]]], path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(payloads, out)


def load(path: str) -> dict[str, list[dict[str, Any]]]:
    try:
        with open(path, encoding="utf-8") as source:
            payloads = json.load(source)
    except (OSError, ValueError) as error:
        raise SystemExit(f"mem0_floor: cannot read the recorded payloads {path}: {error}") from None
    if not isinstance(payloads, dict) or not payloads \
            or not all(isinstance(v, list) and v for v in payloads.values()):
        raise SystemExit(f"mem0_floor: {path} holds no recorded spans by method")
    return payloads


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    # JSON gives lists where the span held tuples; the SDK stores either as a tuple.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


@dataclass(frozen=True)
class Emission:
    """One recorded span as the SDK takes it: what the floor hands over for one traced call."""

    name: str
    kind: SpanKind
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    links: tuple[tuple[SpanContext, dict[str, Any]], ...]
    status: Status | None

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> Emission:
        status = payload["status"]
        return cls(
            name=payload["name"], kind=SpanKind[payload["kind"]],
            attributes=_attributes(payload["attributes"]),
            events=tuple((e["name"], _attributes(e["attributes"])) for e in payload["events"]),
            links=tuple((SpanContext(int(link["trace_id"], 16), int(link["span_id"], 16), is_remote=True,
                                     trace_flags=TraceFlags(link["trace_flags"]),
                                     trace_state=TraceState.from_header([link["trace_state"]])),
                         _attributes(link["attributes"])) for link in payload["links"]),
            status=(None if status["code"] == "UNSET"
                    else Status(StatusCode[status["code"]], status["description"])))


PACKED_LINKS = "memtrace.links"
"""The packed span's attribute holding its links: compact JSON, ``[[trace id, span id, attributes], ...]``."""


def packed(payload: Mapping[str, Any]) -> dict[str, Any]:
    """One recorded span in the packed shape: the same span with no events and no links, what they carried
    moved into string attributes (issue 28's "internal steps as attributes of one span").

    Event *i* becomes the attribute ``<event name>.<i>`` holding its attributes as compact JSON (the
    index keeps two stages of one name apart, in their order); the links become one attribute,
    :data:`PACKED_LINKS`, their span contexts as hex ids with their attributes. Nothing is left out: a
    reader recovers every stage and writer from the strings. The packing is done here, when the payload
    is loaded, so the floor's call pays for emitting the packed span, not for encoding it (an
    instrumentation adopting the shape would encode at the call's end: its own work, not the SDK's)."""
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    attributes = dict(payload["attributes"])
    for index, event in enumerate(payload["events"]):
        attributes[f"{event['name']}.{index}"] = json.dumps(event["attributes"], **compact)
    if payload["links"]:
        attributes[PACKED_LINKS] = json.dumps(
            [[link["trace_id"], link["span_id"], link["attributes"]] for link in payload["links"]], **compact)
    return dict(payload, attributes=attributes, events=[], links=[])


def packed_all(payloads: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Every recorded span of every method in the packed shape (:func:`packed`)."""
    return {method: [packed(p) for p in spans] for method, spans in payloads.items()}


def _cycle(emissions: Sequence[Emission]) -> Iterator[Emission]:
    """The recorded spans in order, from the start again when a run makes more calls than were recorded."""
    while True:
        yield from emissions


class FloorInstrumentor:
    """Wraps ``Memory.add`` / ``Memory.search`` to emit, per traced call, the next recorded span.

    Honours ``suppress_instrumentation`` as memtrace's wrappers do (the benchmark's untraced call)."""

    def __init__(self, payloads: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self._emissions = {method: [Emission.of(p) for p in payloads[method]] for method in METHODS
                           if method in payloads}
        self._wrapped: list[str] = []

    def instrument(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        import importlib

        tracer = trace.get_tracer("memtrace-benchmark-floor", tracer_provider=tracer_provider)
        cls = getattr(importlib.import_module(MODULE), CLASS)
        for method, emissions in self._emissions.items():
            wrapt.wrap_function_wrapper(cls, method, _wrapper(tracer, _cycle(emissions)))
            self._wrapped.append(method)

    def uninstrument(self) -> None:
        import importlib

        cls = getattr(importlib.import_module(MODULE), CLASS)
        for method in reversed(self._wrapped):
            setattr(cls, method, getattr(cls, method).__wrapped__)
        self._wrapped = []


def _wrapper(tracer: trace.Tracer, emissions: Iterator[Emission]) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        e = next(emissions)
        links = [Link(context, attributes) for context, attributes in e.links]
        with tracer.start_as_current_span(e.name, kind=e.kind, attributes=e.attributes, links=links) as span:
            result = wrapped(*args, **kwargs)
            for name, attributes in e.events:
                span.add_event(name, attributes)
            if e.status is not None:
                span.set_status(e.status)
            return result
    return wrapper


def frames_from(call: Callable[[], Any], package: str) -> list[str]:
    """The functions of ``package`` that ran during one ``call``, on its thread or any thread it started
    (mem0 runs its stages in worker threads), sorted: the proof that a path runs none of its code."""
    marker = f"{os.sep}{package}{os.sep}"
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and marker in frame.f_code.co_filename:
            seen.add(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]  # None removes the hook, as for sys
    return sorted(seen)


def emission_cost(payloads: Mapping[str, Sequence[Mapping[str, Any]]], iterations: int,
                  repeats: int = 9) -> dict[str, float]:
    """The floor's emission alone, without mem0: thread CPU per span (µs), medians of rotated rounds.

    Each method's recorded spans go through the very wrapper the benchmark installs, around a call
    that does nothing, on a provider shaped as the benchmark's (a ``BatchSpanProcessor`` feeding an
    exporter that discards); ``bare`` is an empty span the same way. What a span costs in mem0's
    threads, between its allocations and garbage collections, is more (``docs/performance-history.md``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=1 << 16))
    tracer = provider.get_tracer("memtrace-benchmark-floor")
    bare = Emission("bare", SpanKind.INTERNAL, {}, (), (), None)
    arms = {"bare": _wrapper(tracer, _cycle([bare]))}
    for method in METHODS:
        emissions = [Emission.of(p) for p in payloads.get(method, ())]
        if not emissions:
            continue
        # The parts, cumulative: the span with its attributes, then its stage events, then its links.
        arms[f"{method}: span and attributes"] = _wrapper(tracer, _cycle(
            [replace(e, events=(), links=()) for e in emissions]))
        arms[f"{method}: + events"] = _wrapper(tracer, _cycle([replace(e, links=()) for e in emissions]))
        arms[f"{method}: + links (all)"] = _wrapper(tracer, _cycle(emissions))
    names = list(arms)
    samples: dict[str, list[float]] = {name: [] for name in names}

    def nothing() -> None:
        return None

    for r in range(repeats + 1):  # the first round warms up
        for name in names[r % len(names):] + names[:r % len(names)]:
            emit = arms[name]
            start = time.thread_time()
            for _ in range(iterations):
                emit(nothing, None, (), {})
            if r:
                samples[name].append((time.thread_time() - start) / iterations * 1e6)
    provider.shutdown()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description="The floor's emission alone: µs of thread CPU per span.")
    parser.add_argument("payload", help="the spans a mem0_overhead.py --capture run recorded")
    parser.add_argument("--iterations", type=int, default=2000, help="spans per arm and round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = emission_cost(load(args.payload), args.iterations)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for name, us in result.items():
        print(f"{name:30} {us:8.1f} µs per span" + (f" = {us / result['bare']:.1f}x a bare span"
                                                    if name != "bare" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
