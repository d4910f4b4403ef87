"""Instructions `memtrace serve` spends per span receiving, storing and settling memory traffic, counted by
valgrind: a measure the machine's load does not move (issue 28, item 4).

``serve_ingest.py`` times the whole process on a loaded VM, where the figure moves by more than a change to
one part of the path is worth. This counts the instructions (callgrind's ``Ir``) of that path in one
process, without sockets or threads: ``serve_ingest.py``'s pre-encoded requests (200 spans, 1.06% of the
traces failed) handed to the HTTP receiver's WSGI application one after another (the request indexed,
the spans of its failed traces decoded, its body stored, its traces offered to the index, the answer
encoded), then every trace settled as the settle thread does (the clean ones released from the store).
Counting starts after a warm-up of ``--warm`` requests and stops after the settling; the attribution of
the failed traces, waitress's HTTP handling and the threads' hand-offs are not counted (time them with
``serve_ingest.py``). Use it to compare two versions of the code, each run from its own checkout.

    python benchmarks/performance/serve_instructions.py [--requests 200] [--json]    # needs valgrind
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = """
import io, os, subprocess, sys, tempfile, gc
sys.path.insert(0, {here!r})
from serve_ingest import _requests
from memtrace_otel.collector.http_receiver import _Application
from memtrace_otel.collector.serve import build_server
from memtrace_otel.collector.serve_config import ServeConfig
count, warm = int(sys.argv[1]), int(sys.argv[2])
requests = [item for seed in range(4) for item in _requests((count + warm + 3) // 4, seed)][:count + warm]
server = build_server(ServeConfig(data_dir=tempfile.mkdtemp(), settle_seconds=1.0, grpc_port=None,
                                  http_port=0))
app = _Application(server.ingest, 16 << 20, server.admission, True)
def answer(status, headers):
    assert status.startswith("200"), status
def post(part):
    for body, _ in part:
        app({{"PATH_INFO": "/v1/traces", "REQUEST_METHOD": "POST", "CONTENT_LENGTH": str(len(body)),
             "CONTENT_TYPE": "application/x-protobuf", "REMOTE_ADDR": "127.0.0.1",
             "wsgi.input": io.BytesIO(body)}}, answer)
post(requests[:warm])
gc.collect()
gc.freeze()
toggle = ["callgrind_control", "-i"]
subprocess.run([*toggle, "on", str(os.getpid())], stdout=subprocess.DEVNULL, check=True)
post(requests[warm:])
service = server.service
service.assembler.settle_seconds = 0
with service._index_lock:
    if hasattr(service.assembler, "settled_split"):
        clean, failed = service.assembler.settled_split()
    else:  # the code before settled_split
        traces = service.assembler.settled()
        clean, failed = [t.trace_id for t in traces if not t.failed], [t for t in traces if t.failed]
    service.stats.add(traces_settled=len(clean) + len(failed))
    service.store.release(clean, settled_clean=True)
subprocess.run([*toggle, "off", str(os.getpid())], stdout=subprocess.DEVNULL, check=True)
print(sum(spans for _, spans in requests[warm:]), len(clean) + len(failed), flush=True)
os._exit(0)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warm", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.requests < 1 or args.warm < 0:
        parser.error("--requests must be >= 1 and --warm >= 0")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("serve_instructions.py: needs valgrind (callgrind) on PATH")
    here = str(Path(__file__).resolve().parent)
    with tempfile.TemporaryDirectory(prefix="serve-instructions-") as scratch:
        out = os.path.join(scratch, "callgrind.out")
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
             sys.executable, "-c", _CHILD.format(here=here), str(args.requests), str(args.warm)],
            capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(out):
            sys.exit(f"serve_instructions.py: the counted child failed: {run.stderr.strip()[-500:]}")
        spans, settled = (int(field) for field in run.stdout.split())
        instructions = _total(out)
    result = {"requests": args.requests, "spans": spans, "traces_settled": settled,
              "instructions": instructions, "per_span": instructions / spans}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.requests} requests, {spans:,} spans, {settled:,} traces settled: "
              f"{instructions:,} instructions, {instructions / spans:,.0f} per span")


def _total(path: str) -> int:
    """The ``Ir`` total of a callgrind output file: its ``totals:`` line (``summary:`` says 0 when
    instrumentation started off)."""
    for line in reversed(Path(path).read_text().splitlines()):
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"serve_instructions.py: no total in {path}")


if __name__ == "__main__":
    main()
