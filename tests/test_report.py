"""``memtrace report``: the page opened in a real headless Chromium, and the command's edges.

The spans come from the offline example agent (real SDK pipeline, real files);
a hostile ``<script>`` is planted in a question and in a message's content.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memtrace_otel.attribution.runner import analyze
from memtrace_otel.cli import main
from memtrace_otel.report import ReportInput, render_report

from browser_harness import chromium, missing_reason

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAEGER = "http://127.0.0.1:16686"
HOSTILE = "<script>window.pwned=1</script><img src=x onerror=\\\"window.pwned=2\\\">"
browser = pytest.mark.skipif(missing_reason() is not None and not os.environ.get("CI"),
                             reason=f"no headless browser: {missing_reason()}")


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("spans")
    example = os.path.join(ROOT, "examples", "offline_memory_agent.py")
    subprocess.run([sys.executable, example, "--out", str(out)], check=True, capture_output=True)
    path = out / "offline-memory-agent.jsonl"
    text = path.read_text(encoding="utf-8")
    assert "Where did the user move in March?" in text and "Hi! I moved to Lisbon in March." in text
    text = text.replace("Where did the user move in March?", HOSTILE + "Where did the user move in March?")
    text = text.replace("Hi! I moved to Lisbon in March.", HOSTILE + "Hi! I moved to Lisbon in March.")
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def failures(spans: str) -> list[dict]:
    result = CliRunner().invoke(main, ["analyze", spans, "--json"])
    return json.loads(result.stdout)["failures"]


@pytest.fixture(scope="module")
def page(spans: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = CliRunner().invoke(main, ["report", spans, "--out", str(out), "--jaeger", JAEGER])
    assert result.exit_code == 0, result.output
    return str(out)


def test_page_is_self_contained_and_escaped(page: str) -> None:
    html = pathlib.Path(page).read_text(encoding="utf-8")
    assert "<script>window.pwned" not in html and "&lt;script&gt;window.pwned" in html
    assert "http://" not in html.replace(JAEGER, "").replace("http://www.w3.org/2000/svg", "")
    assert "<link" not in html and "src=" not in html.replace("src=x", "")


@browser
def test_report_in_chromium(page: str, failures: list[dict], tmp_path) -> None:
    with chromium() as driver:
        driver.get("file://" + page)
        driver.execute_script("window.memtraceDrawAll()")
        sections = driver.find_elements("css selector", "section.failure")
        assert len(sections) == len(failures) > 0
        counts = driver.execute_script(
            "return Array.from(document.querySelectorAll('#chart-error-types .bar'), b => +b.dataset.count)")
        assert sum(counts) == len(failures)
        types = {f["error_type"] for f in failures}
        labels = driver.execute_script(
            "return Array.from(document.querySelectorAll('#chart-error-types .bar'), b => b.dataset.label)")
        assert set(labels) == types
        for section, failure in zip(sections, failures, strict=True):
            roots = section.find_elements("css selector", "svg.lineage .node.root-cause")
            assert len(roots) == 1
            stroke = roots[0].find_element("css selector", "rect").value_of_css_property("stroke")
            assert stroke == "rgb(217, 45, 32)"  # the page's red
            assert failure["operation_name"] in roots[0].text
            link = section.find_element("css selector", ".verdict a.span-link")
            expected = f"{JAEGER}/trace/{failure['trace_id']}?uiFind={failure['span_id']}"
            assert link.get_attribute("href") == expected
        assert driver.execute_script("return window.pwned") is None
        tooltips = driver.execute_script(
            "return Array.from(document.querySelectorAll('svg.lineage title'), t => t.textContent)")
        assert any("<script>window.pwned=1</script>" in t for t in tooltips)  # drawn as text, not markup
        heading = driver.find_element("css selector", "section.failure h2").text
        assert "<script>window.pwned=1</script>" in heading
        for number, figure in enumerate(driver.find_elements("css selector", "figure"), 1):
            driver.execute_script("arguments[0].scrollIntoView()", figure)
            shot = tmp_path / f"figure-{number}.png"
            figure.screenshot(str(shot))
            assert shot.stat().st_size > 1000


@browser
def test_long_page_draws_pictures_as_their_sections_scroll_in(spans: str, tmp_path) -> None:
    # Pictures are drawn when their section nears the window, watched through the section (an
    # off-screen section is not laid out): the first ones at load, a far one only once scrolled to.
    from selenium.webdriver.support.wait import WebDriverWait

    found = analyze([spans])
    page = tmp_path / "long.html"
    page.write_text(render_report([ReportInput(found.graph, found.attributions)] * 30), encoding="utf-8")
    with chromium() as driver:
        driver.get("file://" + str(page))
        sections = driver.find_elements("css selector", "section.failure")
        assert len(sections) == 30 * len(found.attributions) > 30
        drawn = driver.execute_script("return document.querySelectorAll('svg.lineage').length")
        assert 0 < drawn < len(sections)
        assert not sections[-1].find_elements("css selector", "svg.lineage")
        driver.execute_script("arguments[0].scrollIntoView()", sections[-1])
        WebDriverWait(driver, 30).until(
            lambda d: sections[-1].find_elements("css selector", "svg.lineage .node.root-cause"))


def test_nothing_to_report_is_one_line_and_exit_1(tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(empty), "--out", str(out)])
    assert result.exit_code == 1
    assert "nothing to report" in result.stderr and "Traceback" not in result.output
    assert not out.exists()


def test_bad_lines_are_reported_and_exit_3(spans: str, tmp_path) -> None:
    bad = tmp_path / "spans.jsonl"
    bad.write_text(pathlib.Path(spans).read_text(encoding="utf-8") + "{not json\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["report", str(bad), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 3, result.output
    assert (tmp_path / "r.html").exists() and "spans.jsonl" in result.stderr


def test_missing_file_is_an_error(tmp_path) -> None:
    result = CliRunner().invoke(main, ["report", str(tmp_path / "nope"), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and "no such file" in result.stderr


def _labels(directory: pathlib.Path, spans: str, rows: list[dict]) -> None:
    (directory / "spans").mkdir(parents=True)
    (directory / "spans" / "agent.jsonl").write_text(pathlib.Path(spans).read_text(encoding="utf-8"),
                                                    encoding="utf-8")
    text = "".join(json.dumps(r) + "\n" for r in rows)
    directory.joinpath("labels.jsonl").write_text(text, encoding="utf-8")


def test_bench_reports_the_labelled_cases(spans: str, failures: list[dict], tmp_path) -> None:
    wanted = failures[:2]
    rows = [{"case_id": f["case_id"], "error_type": f["error_type"], "operation": {"name": "labelled.op"},
             "spans": ["spans/agent.jsonl"]} for f in reversed(wanted)]
    rows.append({"case_id": "no-such-case", "error_type": "UpdateError", "operation": {},
                 "spans": ["spans/agent.jsonl"]})
    rows.append({"case_id": "bad", "error_type": "UpdateError", "operation": {},
                 "spans": "spans/agent.jsonl"})
    _labels(tmp_path / "bench", spans, rows)
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["bench", "report", str(tmp_path / "bench"), "--out", str(out)])
    assert result.exit_code == 3, result.output
    # The unusable row is named by its line in the labels file (memtrace_bench.score.load_labels), the rest
    # is drawn.
    assert "no-such-case: no failed evaluation" in result.stderr and "labels.jsonl:4:" in result.stderr
    html = out.read_text(encoding="utf-8")
    assert html.count('<section class="failure"') == len(wanted)  # only the labelled ones, not all failures
    first = html.index(f"{wanted[1]['case_id']}: labelled {wanted[1]['error_type']} in labelled.op")
    assert first < html.index(f"{wanted[0]['case_id']}: labelled")  # in the labels file's order


def test_report_needs_span_files(tmp_path) -> None:
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "Missing argument 'FILE...'" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_pipelines_in_processes_make_the_same_page(spans: str, tmp_path) -> None:
    copies = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        copies.append(str(tmp_path / name / "spans.jsonl"))
        pathlib.Path(copies[-1]).write_text(pathlib.Path(spans).read_text(encoding="utf-8"), encoding="utf-8")
    pages = []
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.html"
        args = ["report", "--separate", "--jobs", jobs, *copies, "--out", str(out)]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        pages.append(out.read_text(encoding="utf-8").replace(str(tmp_path), ""))
    assert pages[0] == pages[1] and pages[0].count('<section class="failure"') > 3
