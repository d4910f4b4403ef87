"""Added time of the mem0 instrumentor per ``Memory.add`` and ``Memory.search``, against bare mem0.

Runs inside a venv with mem0ai (``.ci/install-mem0-venvs.sh`` builds them; 1.x and 2.x):
the real ``Memory``, fully offline, as the generation tests run it: LLM and embedder
on the test suite's local OpenAI-compatible server (extraction, and on 1.x an ADD
decision, answered at once; deterministic embeddings), qdrant in local mode on disk
under a temporary directory, history database there too, telemetry off. Spans go
through a ``BatchSpanProcessor`` to an exporter that discards them: the production
shape, without the cost of an exporter that is not ours.

Calls come in pairs on the same instrumented ``Memory``: one with instrumentation
suppressed (``suppress_instrumentation()``: the wrappers pass straight through), one
traced, back to back, the order alternating; the added time is the median of the
pairs' differences (drift between pairs cancels), against the median suppressed call,
in wall-clock time and, less sensitive to other load on the machine, in process CPU
time (all threads: mem0's workers, the local server, the span processor's worker).
Toggling ``instrument()``/``uninstrument()`` per call would measure re-patching and the
interpreter's invalidated caches instead. That the pass-through wrappers themselves
cost nothing measurable is shown apart: alternating blocks of calls uninstrumented and
instrumented-but-suppressed. Target: added time <= 5% of the call's own time.

The same pairs measure another mem0 instrumentation (``--instrumentation loongsuite``:
loongsuite-instrumentation-mem0, in the venv CI builds for it, with memtrace's instrumentor not
loaded); there the untraced call of a pair is the method its wrapper wraps (``__wrapped__``),
since that instrumentation does not honour ``suppress_instrumentation``. ``--compare`` runs, from
one command, worker processes of each instrumentation in its own venv in alternating rounds
(``--rounds``, medians; ``--before DIR`` adds memtrace from another checkout, e.g. a ``git
worktree`` of the previous commit, run in the memtrace venv).

``--floor`` (with ``--compare``) adds the SDK floor of the same calls (``mem0_floor.py``): a memtrace
worker first records every traced call's span (``--capture FILE``), then floor workers, in memtrace's
venv and rounds alternating with the others, emit those spans through the bare SDK from a second,
minimal instrumentation (``--instrumentation floor --payload FILE``: same span, attributes, stage
events and links, no memtrace code on the path, which the worker checks with a profiler on one call).
memtrace minus the floor is what memtrace's own work costs above the SDK; the floor against
loongsuite says whether the emission alone is above the leanest peer.

    ~/.cache/memtrace/venvs/mem0ai-1.0.11/bin/python benchmarks/performance/mem0_overhead.py [--pairs 150]
    python benchmarks/performance/mem0_overhead.py --compare [--rounds 3] [--pairs 60] [--before DIR] \
        [--mem0 2.2.1] [--floor]
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

os.environ["MEM0_TELEMETRY"] = "False"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# This checkout first (or the one ``--checkout`` names): a cached venv's editable install may point
# at another clone of the project.
_CHECKOUT = sys.argv[sys.argv.index("--checkout") + 1] if "--checkout" in sys.argv[:-1] else ROOT
sys.path[:0] = [_CHECKOUT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "mem0")]
# pyproject maps the top-level collector/ and exporters/ into memtrace_otel (package-dir); a venv's editable
# install maps them only into the clone it was installed from, which may be gone (a CI run's fresh clone):
# the checkout's own folders, found through the package's path.
import memtrace_otel  # noqa: E402

memtrace_otel.__path__.append(_CHECKOUT)
VENVS = os.environ.get("MEMTRACE_MEM0_VENVS", os.path.expanduser("~/.cache/memtrace/venvs"))
_WORKER_VENVS = {"memtrace": "mem0ai-1.0.11", "floor": "mem0ai-1.0.11", "loongsuite": "mem0ai-1.0.11-peers"}
"""The venvs ``.ci/install-mem0-venvs.sh`` builds: mem0ai 1.0.11 with this checkout, and with
loongsuite-instrumentation-mem0 0.9.0 (OpenLIT 1.45.0 does not resolve on Python 3.11). memtrace and
the floor run in the venv of the mem0ai compared (``--mem0``)."""

import mem0_floor  # noqa: E402  (beside this file)
from mem0_app import config  # noqa: E402  (the generation tests' offline mem0 configuration)
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from openai_server import Reply, ScriptedOpenAIServer  # noqa: E402

_TARGET = 0.05


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@functools.cache
def mem0_generation() -> int:
    """The installed mem0ai's major version, read once (the local server asks on every reply)."""
    return int(importlib.metadata.version("mem0ai").split(".", 1)[0])


def _llm(body: dict[str, Any]) -> Reply:
    """Extraction answers one fact (the user's text); 1.x's decision call answers ADD."""
    text = str(body.get("messages", [{}])[-1].get("content", ""))
    fact = f"Fact {abs(hash(text)) % 10_000}"
    if "determine whether these facts should be added" in text:
        return Reply.json({"memory": [{"id": "new", "text": fact, "event": "ADD"}]})
    if mem0_generation() == 1:
        return Reply.json({"facts": [fact]})
    return Reply.json({"memory": [{"text": fact}]})


def _once(call: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    call()
    return clock() - start


def _pair(call: Callable[[], Any], untraced: Callable[[], Any], traced_first: bool,
          clock: Callable[[], float]) -> tuple[float, float]:
    """One call untraced, one traced, back to back: (untraced, traced) seconds."""
    times: dict[bool, float] = {}
    for traced in (traced_first, not traced_first):
        times[traced] = _once(call if traced else untraced, clock)
    return times[False], times[True]


def _suppressed(call: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with suppress_instrumentation():
            return call()
    return run


def _blocks(instrumentor: Any, provider: TracerProvider, call: Callable[[], Any],
            blocks: int, size: int) -> tuple[float, float]:
    """Median call uninstrumented and instrumented-but-suppressed, in alternating blocks (seconds):
    what the wrappers cost when they trace nothing."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for block in range(2 * blocks):
        wrapped = block % 2 == 1
        if not wrapped:
            instrumentor.uninstrument()
        with suppress_instrumentation():
            times[wrapped].extend(_once(call) for _ in range(size))
        if not wrapped:
            instrumentor.instrument(tracer_provider=provider)
    return statistics.median(times[False]), statistics.median(times[True])


def _instrumentor(name: str, payload: str | None = None) -> Any:
    if name == "memtrace":
        from memtrace_otel.instrument.mem0 import Mem0Instrumentor

        return Mem0Instrumentor()
    if name == "floor":
        if not payload:
            raise SystemExit("mem0_overhead: --instrumentation floor needs --payload FILE "
                             "(the spans a --capture run recorded)")
        return mem0_floor.FloorInstrumentor(mem0_floor.load(payload))
    from opentelemetry.instrumentation.mem0 import Mem0Instrumentor as LoongsuiteMem0Instrumentor

    return LoongsuiteMem0Instrumentor()


def _unwrapped(memory: Any, method: str) -> Callable[..., Any]:
    """The method as it was before any instrumentation wrapped it (every ``wrapt`` layer off)."""
    function = type(memory).__dict__[method]
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return functools.partial(function, memory)


def measure(pairs: int, top_k: int, instrumentation: str = "memtrace", payload: str | None = None,
            capture: str | None = None) -> dict[str, Any]:
    """The pairs of one instrumentation (``floor``: replaying ``payload``); ``capture``: a file to
    record every traced call's span into (memtrace), for the floor to replay."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Discard()))
    instrumentor, counter = _instrumentor(instrumentation, payload), iter(range(10**9))
    recorder = mem0_floor.Capture() if capture else None
    if recorder:
        provider.add_span_processor(recorder)
    scope: dict[str, Any] = ({"user_id": "u", "limit": top_k} if mem0_generation() == 1
                             else {"filters": {"user_id": "u"}, "top_k": top_k})
    results: dict[str, list[tuple[float, float]]] = {"add": [], "search": []}
    cpu: dict[str, list[tuple[float, float]]] = {"add": [], "search": []}
    spans = _Counting()
    provider.add_span_processor(spans)
    with ScriptedOpenAIServer(_llm) as server, tempfile.TemporaryDirectory() as data:
        from mem0 import Memory

        memory = Memory.from_config(config(server.base_url, data))
        instrumentor.instrument(tracer_provider=provider)
        methods = {"add": lambda m: m(f"I note item {next(counter)} today.", user_id="u"),
                   "search": lambda m: m(f"What item number {next(counter)}?", **scope)}
        calls: dict[str, Callable[[], Any]] = {name: functools.partial(use, getattr(memory, name))
                                               for name, use in methods.items()}
        if recorder:  # the spans of each call apart, by method, in the order the calls run
            calls = {name: _tagged(recorder, name, call) for name, call in calls.items()}
        # memtrace and the floor honour suppress_instrumentation (their wrappers pass straight through,
        # as every contrib instrumentor's do); loongsuite does not: its untraced call is the bare method.
        untraced = {name: (_suppressed(call) if instrumentation != "loongsuite"
                           else functools.partial(methods[name], _unwrapped(memory, name)))
                    for name, call in calls.items()}
        for _ in range(2 * top_k):  # warm up (hooks installed), and give search something to find
            calls["add"]()
            calls["search"]()
        per_call = {}
        for name, call in calls.items():  # spans one traced call makes
            before = spans.count
            call()
            provider.force_flush()
            per_call[name] = spans.count - before
        for i in range(pairs):
            for name, call in calls.items():
                results[name].append(_pair(call, untraced[name], i % 2 == 0, time.perf_counter))
                cpu[name].append(_pair(call, untraced[name], i % 2 == 1, time.process_time))
        dispatch = ({name: _blocks(instrumentor, provider, call, 5, max(2, pairs // 10))
                     for name, call in calls.items()} if instrumentation == "memtrace" else {})
        # The floor's path runs no memtrace code (mem0_app, for mem0's configuration, imports it):
        # checked on one traced call of each method.
        checked = ({f"{name}_memtrace_frames": mem0_floor.frames_from(call, "memtrace_otel")
                    for name, call in calls.items()} if instrumentation == "floor" else {})
        if any(checked.values()):
            raise SystemExit(f"mem0_overhead: memtrace code ran on the floor's path: {checked}")
        instrumentor.uninstrument()
        getattr(memory, "close", lambda: None)()
    provider.shutdown()
    if recorder and capture:
        mem0_floor.save(recorder.payloads(), capture)
    return {name: {**_summary(pairs_), "spans": per_call[name],
                   **({"bare_ms": dispatch[name][0] * 1e3, "suppressed_ms": dispatch[name][1] * 1e3}
                      if name in dispatch else {}),
                   **{f"cpu_{k}": v for k, v in _summary(cpu[name]).items()}}
            for name, pairs_ in results.items()}


def _tagged(recorder: mem0_floor.Capture, method: str, call: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        recorder.begin(method)
        return call()
    return run


class _Counting(SpanProcessor):
    """Counts ended spans (how many spans one traced call makes)."""

    def __init__(self) -> None:
        self.count = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.count += 1


def _summary(pairs: list[tuple[float, float]]) -> dict[str, float]:
    base = statistics.median(b for b, _ in pairs)
    added = statistics.median(t - b for b, t in pairs)
    return {"paired_base_ms": base * 1e3, "traced_ms": statistics.median(t for _, t in pairs) * 1e3,
            "added_ms": added * 1e3, "share": added / base}


def _worker(instrumentation: str, pairs: int, top_k: int, checkout: str | None,
            mem0: str = "1.0.11", extra: Sequence[str] = ()) -> dict[str, Any]:
    """One measurement in a fresh process of the instrumentation's own venv (memtrace and the floor:
    of ``mem0``); ``extra``: more arguments (``--payload FILE``, ``--capture FILE``)."""
    venv = _WORKER_VENVS[instrumentation] if instrumentation == "loongsuite" else f"mem0ai-{mem0}"
    python = os.path.join(VENVS, venv, "bin", "python")
    command = [python, os.path.abspath(__file__), "--json", "--instrumentation", instrumentation,
               "--pairs", str(pairs), "--top-k", str(top_k), *extra]
    if checkout:
        command += ["--checkout", checkout]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "MEM0_TELEMETRY": "False"})
    if done.returncode != 0:
        raise SystemExit(f"mem0_overhead: the {instrumentation} worker ({python}) failed: "
                         f"{done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return json.loads(done.stdout)


def compare(rounds: int, pairs: int, top_k: int, before: str | None, mem0: str = "1.0.11",
            floor: bool = False) -> dict[str, Any]:
    """Each instrumentation in its own venv, alternating rounds of fresh worker processes: medians.

    ``mem0``: the mem0ai of memtrace's venv; loongsuite runs only beside 1.0.11 (its venv's).
    ``floor``: also the SDK floor, replaying the spans of one memtrace run of the same calls."""
    arms: list[tuple[str, str, str | None, tuple[str, ...]]] = [("memtrace", "memtrace", None, ())]
    if mem0 == "1.0.11":
        arms.append(("loongsuite", "loongsuite", None, ()))
    if before:
        arms.insert(1, ("memtrace, before", "memtrace", before, ()))
    with tempfile.TemporaryDirectory() as scratch:
        if floor:
            payload = os.path.join(scratch, "spans.json")
            _worker("memtrace", pairs, top_k, None, mem0, ("--capture", payload))
            arms.insert(1, (FLOOR, "floor", None, ("--payload", payload)))
        runs = _rounds(arms, rounds, pairs, top_k, mem0)
    summary: dict[str, Any] = {}
    for label, results in runs.items():
        summary[label] = {"mem0ai": results[0]["mem0ai"], **{
            name: {"spans": results[0][name]["spans"],
                   **{key: statistics.median(r[name][key] for r in results)
                      for key in ("cpu_added_ms", "cpu_paired_base_ms", "cpu_share", "added_ms", "share")},
                   "cpu_added_ms_runs": [r[name]["cpu_added_ms"] for r in results]}
            for name in ("add", "search")}}
    if floor:
        summary["against_floor"] = _against_floor(runs)
    summary["openlit"] = ("OpenLIT 1.45.0 not measured: pip cannot install it on Python 3.11 or 3.12 "
                          "(ResolutionImpossible, docs/mem0.md)")
    return summary


FLOOR = "floor (SDK alone)"


def _against_floor(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """memtrace (and the code before, ``--before``) and loongsuite against the floor, per method: each
    round's arms ran one after another, so a round's difference and ratio are paired; medians over the
    rounds."""
    result: dict[str, dict[str, float]] = {}
    for name in ("add", "search"):
        row: dict[str, float] = {}
        for label in ("memtrace", "memtrace, before", "loongsuite"):
            if label not in runs:
                continue
            pairs = [(r[name]["cpu_added_ms"], f[name]["cpu_added_ms"])
                     for r, f in zip(runs[label], runs[FLOOR], strict=True)]
            key = label.replace(", ", "_")  # "memtrace, before" -> memtrace_before_minus_floor_ms
            row[f"{key}_minus_floor_ms"] = statistics.median(a - f for a, f in pairs)
            ratios = [a / f for a, f in pairs if f > 0]
            row[f"{key}_over_floor"] = statistics.median(ratios) if ratios else float("nan")
        result[name] = row
    return result


def _rounds(arms: list[tuple[str, str, str | None, tuple[str, ...]]], rounds: int, pairs: int, top_k: int,
            mem0: str) -> dict[str, list[dict[str, Any]]]:
    """Every arm once per round, the order rotating from round to round."""
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _, _ in arms}
    for r in range(rounds):
        for label, instrumentation, checkout, extra in arms[r % len(arms):] + arms[:r % len(arms)]:
            runs[label].append(_worker(instrumentation, pairs, top_k, checkout, mem0, extra))
            row = runs[label][-1]
            print(f"round {r + 1}: {label:17} add {row['add']['cpu_added_ms']:+.3f} ms CPU, search "
                  f"{row['search']['cpu_added_ms']:+.3f} ms CPU (load average {os.getloadavg()[0]:.1f})",
                  file=sys.stderr)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=150, help="bare/traced call pairs per method")
    parser.add_argument("--top-k", type=int, default=10, help="records a search returns (a typical top-k)")
    parser.add_argument("--instrumentation", choices=sorted(_WORKER_VENVS), default="memtrace")
    parser.add_argument("--checkout", help="the memtrace checkout to import (default: this one)")
    parser.add_argument("--compare", action="store_true",
                        help="memtrace and loongsuite, each in its own venv, alternating rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", help="--compare: also memtrace from this checkout (the code before)")
    parser.add_argument("--mem0", choices=("1.0.11", "2.2.1"), default="1.0.11",
                        help="--compare: memtrace's mem0ai venv (loongsuite runs only beside 1.0.11)")
    parser.add_argument("--floor", action="store_true",
                        help="--compare: also the SDK floor (memtrace's spans replayed through the bare SDK)")
    parser.add_argument("--capture", metavar="FILE",
                        help="memtrace: record every traced call's span into FILE (for --payload)")
    parser.add_argument("--payload", metavar="FILE", help="floor: the spans a --capture run recorded")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.compare:
        result = compare(args.rounds, args.pairs, args.top_k, args.before, args.mem0, args.floor)
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        print(f"{args.rounds} rounds x {args.pairs} pairs per method, medians of the rounds; process CPU")
        for label, row in result.items():
            if isinstance(row, str):
                print(f"  {row}")
                continue
            if label == "against_floor":
                for name, against in row.items():
                    print(f"  {name} against the floor (paired by round, medians): " + "; ".join(
                        f"{key} {value:+.3f} ms" if key.endswith("_ms") else f"{key} {value:.2f}x"
                        for key, value in against.items()))
                continue
            print(f"  {label:17} mem0ai {row['mem0ai']}: " + "; ".join(
                f"{name} {row[name]['spans']} span(s) {row[name]['cpu_added_ms']:+.3f} ms "
                f"({row[name]['cpu_share']:+.1%} of {row[name]['cpu_paired_base_ms']:.2f} ms; rounds "
                + ", ".join(f"{v:+.3f}" for v in row[name]['cpu_added_ms_runs']) + ")"
                for name in ("add", "search")))
        return 0
    import mem0

    summary = {"mem0ai": getattr(mem0, "__version__", str(mem0_generation())),
               "instrumentation": args.instrumentation,
               **measure(args.pairs, args.top_k, args.instrumentation, args.payload, args.capture)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"mem0ai {summary['mem0ai']}, {args.instrumentation}: {args.pairs} untraced/traced pairs per "
          f"method, top-k {args.top_k}")
    for name in ("add", "search"):
        row = summary[name]
        verdict = "meets" if row["share"] <= _TARGET else "misses"
        wrappers = (f"uninstrumented {row['bare_ms']:.2f} ms, wrapped but suppressed "
                    f"{row['suppressed_ms']:.2f} ms; " if "bare_ms" in row else "")
        print(f"  Memory.{name:<6} {row['spans']} span(s); {wrappers}paired: untraced "
              f"{row['paired_base_ms']:.2f} ms, traced {row['traced_ms']:.2f} ms, added "
              f"{row['added_ms']:+.3f} ms = {row['share']:+.1%} ({verdict} the <= 5% target)\n"
              f"{'':16}process CPU time, paired: untraced {row['cpu_paired_base_ms']:.2f} ms, traced "
              f"{row['cpu_traced_ms']:.2f} ms, added {row['cpu_added_ms']:+.3f} ms = {row['cpu_share']:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
