"""`memtrace graph -o FILE` against the library's read + build on the same file, for two checkouts,
interleaved in one run (issue 28, item 3: the command at <= 1.3x the library's CPU). With
``--command report``: `memtrace report --out FILE` against the library's read + build + attribute; with
``--command analyze``: `memtrace analyze --json` (its output discarded) against the same.

Each measurement is a fresh process: the library's read + build is ``graph_build.py``'s script; the
command runs under GNU time (user + system of the whole process), once with each checkout on
``PYTHONPATH``. Both sides are charged the same: the whole process up to the end of its work, the
interpreter's start and the imports included (the library script's CPU read from ``process_time`` at
its end: the command ends by ``os._exit`` without freeing what it built, so the library's own
teardown is not counted either). Until session 48 the library side counted only its work, from before
reading to after building, as ``graph_build.py`` reports it, so the command alone paid for its
imports (about 0.4-0.6 s); that figure is still reported (``library_work_cpu_seconds``). The three
rotate round by round, so each sees the same load; medians are reported. On a machine that other
jobs keep busy, CPU times of one process move by up to 1.6x from run to run: the rounds, not one
pair, are the measurement.

    python benchmarks/performance/graph_command_cpu.py --file SPANS.jsonl --before /tmp/before \\
        --after "$PWD" [--rounds 6] [--command graph|report|analyze] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from graph_build import _ANALYZE, _GRAPH  # the library's work, as graph_build.py measures it

# Each command's arguments after the span file ("{scratch}" is the scratch directory; standard output
# is discarded), and the library's script it is measured against.
_COMMANDS = {"graph": (["-o", "{scratch}/graph.json"], _GRAPH, "read + build"),
             "report": (["--out", "{scratch}/report.html"], _ANALYZE, "read + build + attribute"),
             "analyze": (["--json"], _ANALYZE, "read + build + attribute")}


def _command(root: str, path: str, scratch: str, command: str = "graph") -> float:
    time_binary = shutil.which("time", path="/usr/bin:/bin") or "/usr/bin/time"
    memtrace = str(Path(sys.executable).with_name("memtrace"))
    report = os.path.join(scratch, "time.txt")
    env = dict(os.environ, PYTHONPATH=root)
    options = [option.replace("{scratch}", scratch) for option in _COMMANDS[command][0]]
    subprocess.run([time_binary, "-f", "%U %S", "-o", report, memtrace, command, path, *options],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(report, encoding="utf-8") as handle:
        user, system = handle.read().split()[-2:]
    return float(user) + float(system)


# After the script's own line (spans, work CPU, peak, read CPU): the process's CPU from its start.
_WHOLE = "\nprint(time.process_time())\n"


def _library(root: str, path: str, script: str = _GRAPH) -> tuple[float, float]:
    """The library script's whole-process CPU up to the end of its work, and its work's alone."""
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", script + _WHOLE, path], env=env, check=True,
                         capture_output=True, text=True)
    fields = out.stdout.split()
    return float(fields[-1]), float(fields[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", required=True, help="an OTLP/JSON Lines span file (graph_build.py --file)")
    parser.add_argument("--before", required=True, help="checkout whose command is 'before'")
    parser.add_argument("--after", required=True, help="checkout whose command is 'after' (and whose "
                                                       "library is measured)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--command", choices=sorted(_COMMANDS), default="graph")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cmd = args.command
    _, script, work = _COMMANDS[cmd]
    library_name, before_name, after_name = (f"library {work}", f"memtrace {cmd} (before)",
                                             f"memtrace {cmd} (after)")
    work_alone: list[float] = []

    def measure_library() -> float:
        whole, alone = _library(args.after, args.file, script)
        work_alone.append(alone)
        return whole

    with tempfile.TemporaryDirectory() as scratch:
        measures = {library_name: measure_library,
                    before_name: lambda: _command(args.before, args.file, scratch, cmd),
                    after_name: lambda: _command(args.after, args.file, scratch, cmd)}
        names = list(measures)
        runs: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(measures[name]())
    median = {name: statistics.median(values) for name, values in runs.items()}
    library = median[library_name]
    library_work = statistics.median(work_alone)
    result = {"runs": runs, "median_cpu_seconds": median,
              "before_over_library": median[before_name] / library,
              "after_over_library": median[after_name] / library,
              "library_work_cpu_seconds": work_alone,
              "before_over_library_work": median[before_name] / library_work,
              "after_over_library_work": median[after_name] / library_work}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name in names:
        print(f"{name:34} {median[name]:6.2f} s CPU  ({', '.join(f'{v:.2f}' for v in runs[name])})")
    print(f"memtrace {cmd} / library: before {result['before_over_library']:.2f}x, "
          f"after {result['after_over_library']:.2f}x (target <= 1.3x); against the library's work alone "
          f"(its imports not counted): {result['before_over_library_work']:.2f}x, "
          f"{result['after_over_library_work']:.2f}x")


if __name__ == "__main__":
    main()
