"""Where an instrumentation's added work per mem0 ``Memory.add`` goes, by function: bytecodes executed.

``mem0_instructions.py`` counts a call's instructions, but callgrind sees the interpreter's C functions, not
the Python ones, so it cannot say which Python code runs them. This counts what callgrind cannot split:
the bytecodes each Python function executes (``sys.settrace`` with opcode events, in every thread: the
calling thread, mem0's workers, the batch processor's worker), over ``--calls`` adds after a warm-up, in
a child process of the arm's own venv, the same calls as ``mem0_instructions.py`` (the real ``Memory``,
offline, qdrant local on disk, the test suite's local OpenAI-compatible server in this process, seeded
record and span ids). An arm's added bytecodes per ``add`` are grouped by where their code lives
(memtrace, the OpenTelemetry API and SDK, the standard library's ``copy`` ...), against the bare arm of
its venv. Bytecodes are not instructions (a bytecode calling C runs many), but they are the same in
every run of one code, and a function's share of them says where the Python work is.

    python benchmarks/performance/mem0_bytecodes.py [--arms memtrace,loongsuite] [--calls 10] \
        [--before DIR] [--top 25] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = Path(os.environ.get("MEM0_VENVS", os.path.expanduser("~/.cache/memtrace/venvs")))
GROUPS = ("memtrace_otel", "opentelemetry/sdk", "opentelemetry/attributes", "opentelemetry/instrumentation",
          "opentelemetry/util", "opentelemetry", "wrapt", "mem0/", "qdrant_client", "openai", "httpx",
          "httpcore", "pydantic", "/copy.py", "/inspect.py", "/functools.py", "/enum.py", "/json/",
          "concurrent/futures", "/threading.py")
"""Where a function's code lives, first match (a path's part); anything else is ``other``."""


def _child(args: argparse.Namespace) -> int:
    import gc
    import itertools
    import random
    import threading
    import uuid

    sys.path[:0] = [args.checkout, str(HERE), str(ROOT / "tests"), str(ROOT / "tests" / "mem0")]
    # The checkout's collector/ and exporters/ (pyproject's package-dir), as mem0_overhead.py does: a venv's
    # editable install maps them only into the clone it was installed from, which may be gone.
    import memtrace_otel

    memtrace_otel.__path__.append(args.checkout)
    random.seed(0)
    ids = random.Random(1)
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)  # type: ignore[assignment]
    from mem0_app import config
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    counts: collections.Counter[Any] = collections.Counter()
    on = [False]

    def opcodes(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            counts[frame.f_code] += 1
        return opcodes

    def calls(frame: Any, event: str, arg: Any) -> Any:
        if not on[0]:
            return None
        frame.f_trace_opcodes = True
        return opcodes

    threading.settrace(calls)  # threads started later (mem0's workers, the batch processor's) included
    sys.settrace(calls)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard(), schedule_delay_millis=3_600_000))
    instrumentor: Any = None
    if args.arm == "memtrace":
        from memtrace_otel.instrument.mem0 import Mem0Instrumentor

        instrumentor = Mem0Instrumentor()
    elif args.arm == "loongsuite":
        from opentelemetry.instrumentation.mem0 import Mem0Instrumentor as LoongsuiteMem0Instrumentor

        instrumentor = LoongsuiteMem0Instrumentor()
    from mem0 import Memory

    with tempfile.TemporaryDirectory() as data:
        memory = Memory.from_config(config(args.server, data))
        if instrumentor is not None:
            instrumentor.instrument(tracer_provider=provider)
        counter = itertools.count()
        for _ in range(args.warmup):
            memory.add(f"I note item {next(counter)} today.", user_id="u")
        provider.force_flush()
        gc.collect()
        on[0] = True
        for _ in range(args.calls):
            memory.add(f"I note item {next(counter)} today.", user_id="u")
        provider.force_flush()
        on[0] = False
        if instrumentor is not None:
            instrumentor.uninstrument()
    sys.settrace(None)
    threading.settrace(None)  # type: ignore[arg-type]
    functions: collections.Counter[str] = collections.Counter()
    for code, n in counts.items():
        functions[f"{code.co_filename}:{code.co_firstlineno}:{code.co_qualname}"] += n
    Path(args.out).write_text(json.dumps(functions))
    return 0


def _llm(body: dict[str, Any]) -> Any:
    """``mem0_instructions.py``'s answers: one fact per add, on 1.x the decision ADD."""
    from openai_server import Reply

    text = str(body.get("messages", [{}])[-1].get("content", ""))
    fact = f"Fact {zlib.crc32(text.encode()) % 10_000}"
    if "determine whether these facts should be added" in text:
        return Reply.json({"memory": [{"id": "new", "text": fact, "event": "ADD"}]})
    return Reply.json({"facts": [fact]})


def _group(function: str) -> str:
    path = function.rsplit(":", 2)[0]
    return next((group for group in GROUPS if group in path), "other")


def _counted(arm: str, checkout: str, server: str, options: argparse.Namespace, out: Path) -> dict[str, int]:
    venv = VENVS / ("mem0ai-1.0.11-peers" if arm in ("loongsuite", "bare-peers") else "mem0ai-1.0.11")
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"mem0_bytecodes: no venv for the {arm} arm: {python} missing")
    path = os.pathsep.join([checkout, str(HERE), str(ROOT / "tests"), str(ROOT / "tests" / "mem0")])
    done = subprocess.run([str(python), str(Path(__file__).resolve()), "--child", "--arm",
                           "bare" if arm == "bare-peers" else arm, "--server", server, "--checkout", checkout,
                           "--calls", str(options.calls), "--warmup", str(options.warmup), "--out", str(out)],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=path, PYTHONHASHSEED="0", MEM0_TELEMETRY="False"))
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise SystemExit(f"mem0_bytecodes: the {arm} arm failed: {tail}")
    counts: dict[str, int] = json.loads(out.read_text())
    return counts


def _added(arm: dict[str, int], bare: dict[str, int], calls: int, top: int) -> dict[str, Any]:
    added = {f: (arm.get(f, 0) - bare.get(f, 0)) / calls for f in set(arm) | set(bare)}
    groups: collections.Counter[str] = collections.Counter()
    for function, n in added.items():
        groups[_group(function)] += n
    return {"per_add": sum(arm.values()) / calls, "added": sum(added.values()),
            "groups": {g: round(n) for g, n in groups.most_common() if abs(n) >= 1},
            "functions": {f: round(n) for f, n in sorted(added.items(), key=lambda kv: -abs(kv[1]))[:top]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="memtrace,loongsuite", help="of memtrace, loongsuite (bare always)")
    parser.add_argument("--before", help="also memtrace from this checkout")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--top", type=int, default=25, help="functions listed per arm")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args)
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import ScriptedOpenAIServer

    arms = [a for a in args.arms.split(",") if a]
    if set(arms) - {"memtrace", "loongsuite"}:
        parser.error("--arms: memtrace, loongsuite")
    plan = [("bare", "bare", args.checkout)]
    plan += [("memtrace", "memtrace", args.checkout)] if "memtrace" in arms else []
    plan += [("memtrace, before", "memtrace", str(Path(args.before).resolve()))] if args.before else []
    plan += [("bare-peers", "bare-peers", args.checkout), ("loongsuite", "loongsuite", args.checkout)] \
        if "loongsuite" in arms else []
    counts: dict[str, dict[str, int]] = {}
    with ScriptedOpenAIServer(_llm) as server, tempfile.TemporaryDirectory() as scratch:
        for label, arm, checkout in plan:
            out = Path(scratch) / f"{len(counts)}.json"
            counts[label] = _counted(arm, checkout, server.base_url, args, out)
    result = {label: _added(c, counts["bare-peers" if label == "loongsuite" else "bare"], args.calls,
                            args.top) for label, c in counts.items() if not label.startswith("bare")}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for label, row in result.items():
        print(f"{label}: {row['added']:+,.0f} bytecodes per add (of {row['per_add']:,.0f})")
        for group, n in row["groups"].items():
            print(f"  {group:32} {n:+8,}")
        for function, n in row["functions"].items():
            print(f"    {n:+7,}  {function[-100:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
