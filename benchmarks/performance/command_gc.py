"""The full (oldest-generation) collections a ``memtrace`` command runs, and their time (issue 28, item 3).

A command that loads a 100k-span file holds half a million dicts; each full collection of the cyclic
garbage collector walks all of them. This runs the command in this process, as its console script
would (the process's own arguments: ``os._exit`` at the end), with a ``gc.callbacks`` hook, and prints
each full collection (its wall seconds, and the process's CPU seconds when it ended) and the process's
total CPU, just before the command's exit.

    PYTHONPATH=<checkout> python benchmarks/performance/command_gc.py report SPANS.jsonl --out /tmp/r.html
    PYTHONPATH=<checkout> python benchmarks/performance/command_gc.py analyze SPANS.jsonl --json >/dev/null
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any, NoReturn

_collections: list[tuple[float, float]] = []
_started: list[float] = []


def _watch(phase: str, info: dict[str, Any]) -> None:
    if info["generation"] != 2:
        return
    if phase == "start":
        _started[:] = [time.perf_counter()]
    elif _started:
        _collections.append((time.process_time(), time.perf_counter() - _started[0]))


def _exit(code: int, _real: Any = os._exit) -> NoReturn:
    _say()
    _real(code)
    raise AssertionError("unreachable")  # pragma: no cover


def _say() -> None:
    spent = sum(seconds for _, seconds in _collections)
    each = ", ".join(f"{seconds:.2f} s at {cpu:.2f}" for cpu, seconds in _collections)
    when = f" ({each}; process CPU seconds when each ended)" if _collections else ""
    print(f"command_gc: {len(_collections)} full collections, {spent:.2f} s wall{when}; process CPU "
          f"{time.process_time():.2f} s", file=sys.stderr)


def main() -> None:
    gc.callbacks.append(_watch)
    os._exit = _exit  # type: ignore[assignment]  # the command ends with os._exit: say it first
    from memtrace_otel.cli import main as memtrace

    sys.argv = ["memtrace", *sys.argv[1:]]
    try:
        memtrace()
    finally:
        _say()


if __name__ == "__main__":
    main()
