"""``memtrace report`` at the benchmark's scale: build time of the page, and time to open it in Chromium.

Runs ``memtrace report --separate --jobs N`` on span directories of a benchmark
build (``memtrace bench build --out DIR``; by default every system's clean runs
of every conversation, ``DIR/spans/*/*/clean``, one pipeline each: their
natural failures), or with ``--labelled`` ``memtrace bench report DIR`` (the
build's labelled cases, each on the graph of its own span files), timing the
whole command (read, build graphs, attribute, draw, write); then opens the page
from ``file://`` in headless Chromium (Debian's ``chromium`` +
``chromium-driver``, through Selenium), timing navigation start to the load
event, and counting the lineage pictures drawn by then.

Target: >= 500 failures built in <= 30 s and opened in <= 3 s.

    python benchmarks/performance/report_scale.py --bench DIR [--systems mem0-style rag ...] \
        [--jobs 2] [--out FILE] [--phases] [--bare-parse]
    python benchmarks/performance/report_scale.py --bench DIR --labelled [--jobs 2]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from browser_harness import chromium, missing_reason

_MEMTRACE = os.path.join(os.path.dirname(sys.executable), "memtrace")


def build(inputs: list[str], out: str, jobs: int) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (the command and its workers: the machine may be shared), failures."""
    command = [_MEMTRACE, *inputs, "--jobs", str(jobs), "--out", out]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode not in (0, 3):
        raise SystemExit(f"memtrace report failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    found = re.search(r"(\d+) failed answer", done.stderr)
    return seconds, cpu, int(found.group(1)) if found else 0


def phases(directories: list[str]) -> dict[str, float]:
    """CPU seconds of each phase, in this process, one pipeline after the other: what dominates."""
    from memtrace_otel.attribution.runner import attribute_failures
    from memtrace_otel.graph.build import build_graph
    from memtrace_otel.report import ReportInput, StringTable, draw_failures, render_page
    from memtrace_otel.spans.readers import read_span_files

    spent = dict.fromkeys(("read", "build", "attribute", "slice_layout_draw", "page"), 0.0)
    drawn, table = [], StringTable()

    def timed(phase: str, work: Callable[[], Any]) -> Any:
        started = time.process_time()
        result = work()
        spent[phase] += time.process_time() - started
        return result
    for directory in directories:
        spans = timed("read", lambda d=directory: read_span_files([d]).spans)
        graph = timed("build", lambda s=spans: build_graph(s))
        found = timed("attribute", lambda g=graph: attribute_failures(g, "lineage", warn=lambda _m: None))
        drawn += timed("slice_layout_draw", lambda g=graph, f=found: list(draw_failures(ReportInput(g, f),
                                                                                           table)))
    timed("page", lambda: render_page(drawn, table))
    return {phase: round(seconds, 1) for phase, seconds in spent.items()}


def bare_parse(directories: list[str]) -> float:
    """CPU seconds of ``json.loads`` of every line of the pipelines' span files, in this process: the
    machine's own speed on the same bytes, to compare a build's CPU with across sessions."""
    import gzip

    started = time.process_time()
    for directory in directories:
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            with (gzip.open(path, "rb") if name.endswith(".gz") else open(path, "rb")) as handle:
                for line in handle:
                    if line.strip():
                        json.loads(line)
    return time.process_time() - started


def open_in_chromium(path: str) -> dict[str, float]:
    with chromium() as driver:
        started = time.perf_counter()
        driver.get("file://" + os.path.abspath(path))  # returns after the load event
        wall = time.perf_counter() - started
        timing = driver.execute_script(
            "var t = performance.timing; return {load: t.loadEventEnd - t.navigationStart,"
            " dom: t.domContentLoadedEventEnd - t.navigationStart,"
            " drawn: document.querySelectorAll('svg.lineage').length,"
            " sections: document.querySelectorAll('section.failure').length};")
    return {"wall_s": round(wall, 3), "load_s": timing["load"] / 1000, "dom_s": timing["dom"] / 1000,
            "sections": timing["sections"], "pictures_drawn_at_load": timing["drawn"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="a `memtrace bench build` output directory")
    parser.add_argument("--systems", nargs="*", help="only these systems (default: all)")
    parser.add_argument("--labelled", action="store_true", help="the build's labelled cases (--bench DIR)")
    parser.add_argument("--jobs", type=int, default=2, help="memtrace report --jobs (default 2)")
    parser.add_argument("--phases", action="store_true",
                        help="also time each phase in one process (CPU seconds; natural failures only)")
    parser.add_argument("--bare-parse", action="store_true",
                        help="also time a bare json parse of the same span files (CPU seconds, one process)")
    parser.add_argument("--out", default="/tmp/memtrace-report-scale.html")
    args = parser.parse_args()
    reason = missing_reason()
    if reason:
        raise SystemExit(f"cannot open the page: {reason}")
    directories = sorted(d for d in glob.glob(os.path.join(args.bench, "spans", "*", "*", "clean"))
                         if not args.systems or d.split(os.sep)[-3] in args.systems)
    inputs = ["bench", "report", args.bench] if args.labelled else ["report", "--separate", *directories]
    seconds, cpu, failures = build(inputs, args.out, args.jobs)
    result: dict[str, Any] = {
        "pipelines": "labelled" if args.labelled else len(directories), "failures": failures,
        "jobs": args.jobs, "build_s": round(seconds, 2), "build_cpu_s": round(cpu, 2),
        "load_average": round(os.getloadavg()[0], 1), "html_mib": round(os.path.getsize(args.out) / 2**20, 1)}
    try:
        result.update(open_in_chromium(args.out))
    except Exception as error:  # Selenium's, urllib3's: a failed open must not lose the build's figures
        lines = str(error).strip().splitlines()
        result["open_error"] = f"{type(error).__name__}: {lines[0] if lines else ''}"
    if args.phases and not args.labelled:
        result["phases_cpu_s"] = phases(directories)
    if args.bare_parse and not args.labelled:
        result["bare_parse_cpu_s"] = round(bare_parse(directories), 2)
    print(json.dumps(result, indent=2))
    if "open_error" in result:
        raise SystemExit(f"report_scale: the page was built but did not open: {result['open_error']}")


if __name__ == "__main__":
    main()
