"""Instructions per mem0 ``Memory.add`` and ``Memory.search``: memtrace against loongsuite and the SDK floor,
counted by valgrind, a measure the machine's load does not move (issue 28, item 1).

``mem0_overhead.py --compare --floor`` times the calls; at this VM's load its rounds spread by 0.45-0.7 ms,
more than memtrace and loongsuite differ by. This counts the instructions instead (callgrind's ``Ir``), the
method of ``op_instructions.py``: each arm is a child process of its own venv under callgrind, which runs
the same calls as ``mem0_overhead.py`` (the real ``Memory``, offline: qdrant in local mode on disk under a
fresh temporary directory, history database there, telemetry off; LLM and embedder on the test suite's
local OpenAI-compatible server, which runs in this process, not the child: its instructions are not
counted), a warm-up of ``--warmup`` adds and searches, then ``--calls`` adds, then ``--calls`` searches.
The child marks the phases by calling ``os.getppid()``, on which callgrind dumps its counters
(``--dump-before=getppid``): a phase's count is the calls' alone, the start-up and warm-up left out, as
``op_instructions.py``'s difference of two children leaves them out, in one child instead of two.

Arms: ``bare`` (mem0 untraced), ``memtrace`` (``Mem0Instrumentor``), ``floor`` (``mem0_floor.py``'s
``FloorInstrumentor``: memtrace's spans of the same calls, recorded first by a run of the same sequence
outside valgrind, replayed through the bare SDK), ``packed`` (the same floor with each span's events and
links packed into string attributes: ``mem0_floor.packed``), ``loongsuite`` (loongsuite-instrumentation-mem0,
in the -peers venv, with its own ``bare``: ``bare-peers``). Added instructions per call = arm − the bare arm
of its venv. Spans go through a ``BatchSpanProcessor`` to an exporter that discards them (the production
shape), its timer set to an hour and flushed at the end of each phase, so its worker thread exports
each phase's spans inside that phase and never wakes at a time the load decides.

What is counted: every user-space instruction of the child, in all its threads (callgrind's default,
``--separate-threads=no``): the calling thread, mem0's worker threads (1.x runs the vector store and the
graph in a ``ThreadPoolExecutor``; the LLM and embedder HTTP requests, their JSON, qdrant's numpy and
sqlite work), the batch processor's worker, garbage collection wherever it runs. Not counted: the
kernel's work (system calls, the loopback sockets) and the server's. Callgrind runs the child's threads
one at a time, so the count does not depend on how they interleave; the same seeds (``PYTHONHASHSEED=0``
in the child, mem0's record ids and the SDK's trace and span ids drawn from seeded generators, the
server's replies a function of the request text) and the same calls in every arm make the store's state
the same before each call: ``--repeat 2`` runs every arm twice to show how far the
count moves between two runs of one arm. It counts no cache misses or mispredictions, which time also
pays: use it to compare instrumentations and versions of one code, beside the timings.

    python benchmarks/performance/mem0_instructions.py [--mem0 1.0.11 2.2.1] [--calls 30] [--warmup 10] \
        [--repeat 2] [--variants V,...] [--before DIR] [--keep DIR] [--json]           # needs valgrind

``--variants`` adds memtrace arms with one of ``mem0_record_less.py``'s variants applied each (what a
part of memtrace's work costs, in instructions; ``a+b`` applies two at once), on the stage-event shape they
take parts out of; this script's own: ``events``, that shape whole (the ``add`` before it was packed), and
``no-processor``, which leaves the batch processor out (what queuing and exporting the spans costs);
``--before DIR`` a memtrace arm importing another checkout; ``--arms`` leaves out arms (``bare`` always
runs); ``--keep DIR`` keeps callgrind's per-phase files (``<arm>.<pid>.2`` the adds, ``.3`` the
searches) for ``callgrind_annotate --inclusive=yes``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = Path(os.environ.get("MEMTRACE_MEM0_VENVS", os.path.expanduser("~/.cache/memtrace/venvs")))
PHASES = ("setup", "add", "search")
_OWN_VARIANTS = ("no-processor", "events")
"""Variants this script applies itself: ``no-processor`` (spans made, never queued nor exported) and
``events`` (``Mem0Instrumentor(packed=False)``: the ``add``'s stages as ``memtrace.stage`` events, the shape
before the packed ``add``; ``mem0_record_less.py``'s variants act on that shape)."""
"""What the dumps before each ``os.getppid()`` hold: the start-up and warm-up, the adds, the searches."""


# ---------------------------------------------------------------------------------------------- child

def _child(args: argparse.Namespace) -> int:
    """One arm: the calls, phase by phase, in this process (under callgrind; plainly with ``--capture``)."""
    import gc
    import importlib.metadata
    import itertools

    os.environ["MEM0_TELEMETRY"] = "False"
    sys.path[:0] = [args.checkout, str(HERE), str(ROOT / "tests"), str(ROOT / "tests" / "mem0")]
    # The checkout's collector/ and exporters/ (pyproject's package-dir), as mem0_overhead.py does: a venv's
    # editable install maps them only into the clone it was installed from, which may be gone.
    import memtrace_otel

    memtrace_otel.__path__.append(args.checkout)
    if args.seeded:
        _seed()
    from mem0_app import config
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    variants = [v for v in (args.variant or "").split("+") if v]
    provider = TracerProvider()
    if "no-processor" not in variants:  # the pseudo-variant: spans made, never queued nor exported
        # An hour's timer: the worker exports when a phase ends (force_flush), never when the clock says.
        provider.add_span_processor(BatchSpanProcessor(Discard(), schedule_delay_millis=3_600_000))
    instrumentor: Any = None
    recorder: Any = None
    if args.arm in ("memtrace", "capture"):
        from memtrace_otel.instrument.mem0 import Mem0Instrumentor

        instrumentor = Mem0Instrumentor()
        if args.arm == "capture":
            import mem0_floor

            recorder = mem0_floor.Capture()
            provider.add_span_processor(recorder)
        if variants:
            import mem0_record_less

            for name in variants:  # several variants at once: a+b
                if name in _OWN_VARIANTS:
                    continue
                if name not in mem0_record_less.VARIANTS:
                    raise SystemExit(f"mem0_instructions: unknown variant {name!r}; known: "
                                     f"{', '.join(mem0_record_less.VARIANTS)}")
                mem0_record_less._apply(mem0_record_less.VARIANTS[name][0]())
    elif args.arm in ("floor", "packed"):
        import mem0_floor

        payloads = mem0_floor.load(args.payload)
        instrumentor = mem0_floor.FloorInstrumentor(
            mem0_floor.packed_all(payloads) if args.arm == "packed" else payloads)
    elif args.arm == "loongsuite":
        from opentelemetry.instrumentation.mem0 import Mem0Instrumentor as LoongsuiteMem0Instrumentor

        instrumentor = LoongsuiteMem0Instrumentor()
    from mem0 import Memory

    generation = int(importlib.metadata.version("mem0ai").split(".", 1)[0])
    scope: dict[str, Any] = ({"user_id": "u", "limit": args.top_k} if generation == 1
                             else {"filters": {"user_id": "u"}, "top_k": args.top_k})
    with tempfile.TemporaryDirectory() as data:
        memory = Memory.from_config(config(args.server, data))
        if instrumentor is not None:
            # The record-less variants take parts out of the stage-event shape: they imply it.
            events = any(v != "no-processor" for v in variants)
            options = {"packed": not events} if args.arm in ("memtrace", "capture") else {}
            instrumentor.instrument(tracer_provider=provider, **options)
        counter = itertools.count()

        def add() -> None:
            if recorder:
                recorder.begin("add")
            memory.add(f"I note item {next(counter)} today.", user_id="u")

        def search() -> None:
            if recorder:
                recorder.begin("search")
            memory.search(f"What item number {next(counter)}?", **scope)

        for _ in range(args.warmup):
            add()
            search()
        provider.force_flush()
        gc.collect()
        os.getppid()  # callgrind dumps: start-up and warm-up
        for _ in range(args.calls):
            add()
        provider.force_flush()
        os.getppid()  # the adds
        for _ in range(args.calls):
            search()
        provider.force_flush()
        os.getppid()  # the searches
        if instrumentor is not None:
            instrumentor.uninstrument()
        getattr(memory, "close", lambda: None)()
    provider.shutdown()
    if recorder:
        import mem0_floor

        mem0_floor.save(recorder.payloads(), args.capture)
    return 0


def _seed() -> None:
    """The same record ids (mem0's ``uuid.uuid4()``) and trace and span ids (the SDK's ``random``) in every
    run of every arm: the store's dictionaries then hold the same keys, in the same slots, call by call."""
    import random
    import uuid

    random.seed(0)
    ids = random.Random(1)
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)


# ----------------------------------------------------------------------------------------- the server

def _llm(generation: int) -> Any:
    """The local server's answers, as ``mem0_overhead.py``'s: one fact per add (a function of the text,
    not of the process's string hash), and on 1.x the decision ADD."""
    from openai_server import Reply

    def reply(body: dict[str, Any]) -> Any:
        text = str(body.get("messages", [{}])[-1].get("content", ""))
        fact = f"Fact {zlib.crc32(text.encode()) % 10_000}"
        if "determine whether these facts should be added" in text:
            return Reply.json({"memory": [{"id": "new", "text": fact, "event": "ADD"}]})
        if generation == 1:
            return Reply.json({"facts": [fact]})
        return Reply.json({"memory": [{"text": fact}]})

    return reply


# ------------------------------------------------------------------------------------------ the parent

def _venv(arm: str, mem0: str) -> Path:
    return VENVS / (f"mem0ai-{mem0}-peers" if arm in ("loongsuite", "bare-peers") else f"mem0ai-{mem0}")


def _command(arm: str, mem0: str, server: str, options: argparse.Namespace, checkout: str,
             variant: str | None = None, payload: str | None = None,
             capture: str | None = None) -> list[str]:
    python = _venv(arm, mem0) / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"mem0_instructions: no venv for the {arm} arm of mem0ai {mem0}: {python} missing")
    command = [str(python), str(Path(__file__).resolve()), "--child", "--arm",
               "bare" if arm == "bare-peers" else arm, "--server", server, "--calls", str(options.calls),
               "--warmup", str(options.warmup), "--top-k", str(options.top_k), "--checkout", checkout,
               "--seeded"]
    for flag, value in (("--variant", variant), ("--payload", payload), ("--capture", capture)):
        if value:
            command += [flag, value]
    return command


def _environment(checkout: str) -> dict[str, str]:
    # This checkout's memtrace first (a venv's editable install may point at another clone); the same
    # string hashes in every run.
    path = os.pathsep.join([checkout, str(HERE), str(ROOT / "tests"), str(ROOT / "tests" / "mem0")])
    return dict(os.environ, PYTHONPATH=path, PYTHONHASHSEED="0", MEM0_TELEMETRY="False")


def _counted(label: str, command: list[str], checkout: str, out: Path) -> dict[str, int]:
    """One arm under callgrind: instructions per phase (its dump files kept under ``out``)."""
    stem = out / re.sub(r"[^\w.-]+", "_", label)
    done = subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=getppid",
                           f"--callgrind-out-file={stem}.%p", *command],
                          capture_output=True, text=True, env=_environment(checkout))
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise SystemExit(f"mem0_instructions: the {label} arm failed under valgrind: {tail}")
    pid = re.search(r"==(\d+)== Callgrind", done.stderr)
    if pid is None:
        raise SystemExit(f"mem0_instructions: valgrind printed no process id for the {label} arm")
    dumps = sorted(out.glob(f"{stem.name}.{pid.group(1)}.*"), key=lambda p: int(p.suffix[1:]))
    if len(dumps) != len(PHASES):  # something else called getppid, and split a phase
        raise SystemExit(f"mem0_instructions: the {label} arm made {len(dumps)} callgrind dumps, not "
                         f"{len(PHASES)} (one per os.getppid() marker)")
    return {phase: _total(dump) for phase, dump in zip(PHASES, dumps, strict=True)}


def _total(dump: Path) -> int:
    with dump.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"mem0_instructions: {dump} holds no instruction total")


def measure(options: argparse.Namespace, mem0: str, out: Path) -> dict[str, Any]:
    """Every arm of one mem0ai generation, ``--repeat`` times (arms in the same order each time)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import ScriptedOpenAIServer

    checkout = str(Path(options.checkout).resolve())
    arms: list[tuple[str, str, str, str | None]] = [("bare", "bare", checkout, None)]
    if "memtrace" in options.arms:
        arms.append(("memtrace", "memtrace", checkout, None))
    if options.before:
        arms.append(("memtrace, before", "memtrace", str(Path(options.before).resolve()), None))
    arms += [(f"memtrace {v}", "memtrace", checkout, v) for v in options.variants]
    if "floor" in options.arms:
        arms.append(("floor", "floor", checkout, None))
    if "packed" in options.arms:
        arms.append(("packed floor", "packed", checkout, None))
    if "loongsuite" in options.arms and _venv("loongsuite", mem0).exists():
        arms += [("bare-peers", "bare-peers", checkout, None), ("loongsuite", "loongsuite", checkout, None)]
    runs: dict[str, list[dict[str, int]]] = {label: [] for label, _, _, _ in arms}
    with ScriptedOpenAIServer(_llm(int(mem0.split(".")[0]))) as server:
        payload = str(out / f"floor-{mem0}.json")
        capture = _command("capture", mem0, server.base_url, options, checkout, capture=payload)
        done = (subprocess.run(capture, capture_output=True, text=True, env=_environment(checkout))
                if {"floor", "packed"} & set(options.arms) else None)
        if done is not None and done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise SystemExit(f"mem0_instructions: recording memtrace's spans for the floor failed: {tail}")
        for repeat in range(options.repeat):
            for label, arm, code, variant in arms:
                command = _command(arm, mem0, server.base_url, options, code, variant,
                                   payload if arm in ("floor", "packed") else None)
                runs[label].append(_counted(f"{mem0}-{label}-{repeat + 1}", command, code, out))
                row = runs[label][-1]
                print(f"mem0ai {mem0} run {repeat + 1}: {label:24} add {row['add'] / options.calls:12,.0f}  "
                      f"search {row['search'] / options.calls:12,.0f} instructions per call "
                      f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
    return _summary(runs, options.calls)


def _summary(runs: dict[str, list[dict[str, int]]], calls: int) -> dict[str, Any]:
    """Per arm and method: instructions per call in each run, and added over its venv's bare arm."""
    result: dict[str, Any] = {}
    for label, counts in runs.items():
        bare = runs["bare-peers" if label == "loongsuite" else "bare"]
        row: dict[str, Any] = {}
        for method in ("add", "search"):
            per_call = [c[method] / calls for c in counts]
            row[method] = {"ir_runs": per_call, "ir": statistics.median(per_call),
                           "spread": (max(per_call) - min(per_call)) / statistics.median(per_call)}
            if not label.startswith("bare"):
                added = [(c[method] - b[method]) / calls for c, b in zip(counts, bare, strict=True)]
                row[method]["added_runs"] = added
                row[method]["added"] = statistics.median(added)
        result[label] = row
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mem0", nargs="+", choices=("1.0.11", "2.2.1"), default=["1.0.11", "2.2.1"])
    parser.add_argument("--calls", type=int, default=30, help="adds, then searches, counted per arm")
    parser.add_argument("--warmup", type=int, default=10, help="adds and searches before the counted calls")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2, help="runs of every arm (the count's own spread)")
    parser.add_argument("--variants", default="",
                        help="memtrace arms with mem0_record_less.py variants (V or V1+V2 each), by commas")
    parser.add_argument("--arms", default="memtrace,floor,loongsuite",
                        help="of memtrace, floor, packed, loongsuite (the bare arms always run: the "
                        "figures' base)")
    parser.add_argument("--before", help="also memtrace from this checkout (e.g. a git worktree of main)")
    parser.add_argument("--checkout", default=str(ROOT), help="the memtrace checkout the arms import")
    parser.add_argument("--keep", help="keep callgrind's per-phase files in this directory")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--payload", help=argparse.SUPPRESS)
    parser.add_argument("--capture", help=argparse.SUPPRESS)
    parser.add_argument("--seeded", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args)
    args.variants = [v for v in args.variants.split(",") if v]
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in args.arms if a not in ("memtrace", "floor", "packed", "loongsuite")]
    if unknown:
        parser.error(f"unknown arm(s) {', '.join(unknown)}; known: memtrace, floor, packed, loongsuite")
    if shutil.which("valgrind") is None:
        raise SystemExit("mem0_instructions: valgrind is not installed (apt-get install valgrind)")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(args.keep) if args.keep else Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        for mem0 in args.mem0:
            results[mem0] = measure(args, mem0, out)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"instructions per call (callgrind Ir, all threads of the child), {args.calls} calls after "
          f"{args.warmup} warm-up adds and searches; median of {args.repeat} run(s), "
          "spread = (max - min) / median")
    for mem0, arms in results.items():
        for label, row in arms.items():
            print(f"  mem0ai {mem0} {label:24} " + "; ".join(
                f"{m} {row[m]['ir']:12,.0f} (spread {row[m]['spread']:.2%})"
                + (f" added {row[m]['added']:+11,.0f} (runs "
                   + ", ".join(f"{a:+,.0f}" for a in row[m]['added_runs']) + ")" if "added" in row[m] else "")
                for m in ("add", "search")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
