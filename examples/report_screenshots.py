"""Make docs/report.md's screenshots: the offline example's spans -> `memtrace report` -> headless Chromium.

    python examples/report_screenshots.py                  # into a new temporary directory
    python examples/report_screenshots.py --out docs/img   # replace the tracked screenshots

Writes into a new temporary directory unless ``--out`` says where (the tracked ``docs/img`` is
replaced only when asked). Needs Debian's chromium and chromium-driver, and selenium (the
``[test]`` extra).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from browser_harness import chromium, missing_reason  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None,
                        help="directory for the PNGs (default: a new temporary directory; docs/img replaces "
                             "the tracked screenshots)")
    parser.add_argument("--figures", type=int, default=3, help="how many failure sections to capture")
    args = parser.parse_args()
    if missing_reason():
        raise SystemExit(f"examples/report_screenshots.py: {missing_reason()}")
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix="memtrace-screenshots-")
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([sys.executable, os.path.join(HERE, "offline_memory_agent.py"), "--out", work],
                       check=True, capture_output=True)
        page = os.path.join(work, "report.html")
        memtrace = os.path.join(os.path.dirname(sys.executable), "memtrace")
        subprocess.run([memtrace, "report", work, "--out", page, "--jaeger", "http://127.0.0.1:16686"],
                       check=True)
        with chromium(width=1500, height=1200) as driver:
            driver.get("file://" + page)
            driver.execute_script("window.memtraceDrawAll(); document.querySelectorAll('.figure')"
                                  ".forEach(f => f.style.maxHeight = 'none')")
            widest = driver.execute_script(
                "return Math.max(...Array.from(document.querySelectorAll('svg.lineage'),"
                " s => s.width.baseVal.value))")
            driver.set_window_size(max(1500, int(widest) + 120), 1200)
            summary = driver.find_element("css selector", "#summary")
            summary.screenshot(os.path.join(args.out, "report-summary.png"))
            sections = driver.find_elements("css selector", "section.failure")[: args.figures]
            for number, section in enumerate(sections, 1):
                driver.execute_script("arguments[0].scrollIntoView()", section)
                section.screenshot(os.path.join(args.out, f"report-failure-{number}.png"))
    print(f"screenshots written to {os.path.abspath(args.out)}")


if __name__ == "__main__":
    main()
