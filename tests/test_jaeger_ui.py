"""Root causes in the real Jaeger UI (issue 25, items 1 and 2), walked as a user walks them.

Jaeger v2.13.0 serves the real Jaeger UI v1.76.0 (``.ci/install-jaeger-ui.sh``) through
``ui.assets_path``, with the project's UI config ``collector/jaeger-ui.json``. The memory agent of
``examples/jaeger_writeback.py`` (the in-process AttributionSpanProcessor on the application's
provider) exports to it. Headless Chromium then, on the rendered pages only:

1. searches the application's service by tag ``memtrace.error_type=UpdateError`` (the form, as
   typed) and opens the failed question's trace from the results;
2. opens the ``memtrace.attribution`` span and reads the error type, the explanation and the blamed
   operation's name in its tags;
3. follows its ``FOLLOWS_FROM`` reference, and the ``linkPatterns`` link on
   ``memtrace.root_cause.trace_id``, to the root-cause trace, where the blamed span is highlighted;
4. from the ``memtrace.root_cause`` span there, follows the link back to the failed evaluation,
   highlighted in its trace.

Skipped with the reason when Jaeger, the UI or Chromium is missing; on CI (``CI=true``) that fails.
``MEMTRACE_SCREENSHOTS=DIR`` saves a screenshot of each step as ``DIR/jaeger-*.png`` (the ones in
``docs/img/`` come from ``MEMTRACE_SCREENSHOTS=docs/img``); without it nothing is written.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.semconv import AnnotationSpan, ErrorType, MemTraceAttribution

import jaeger_harness
from browser_harness import chromium, missing_reason
from jaeger_harness import JaegerEndpoints, wait_for_trace

jaeger = jaeger_harness.jaeger  # the session fixture, visible to this module's tests

_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_A = MemTraceAttribution
_WAIT = 30.0  # seconds a page may take to render what is looked for (a loaded 2-core VM)
ENV_SCREENSHOTS = "MEMTRACE_SCREENSHOTS"


@dataclass
class Verdict:
    """One UpdateError the processor wrote, blamed on an operation in an older (ingestion) trace."""

    service: str
    attributes: dict[str, Any]
    blamed_name: str
    """The blamed span's name, as Jaeger shows it in the trace's span list."""
    evaluation_name: str

    @property
    def evaluation(self) -> tuple[str, str]:
        return self.attributes[_A.EVALUATION_TRACE_ID], self.attributes[_A.EVALUATION_SPAN_ID]

    @property
    def root_cause(self) -> tuple[str, str]:
        return self.attributes[_A.ROOT_CAUSE_TRACE_ID], self.attributes[_A.ROOT_CAUSE_SPAN_ID]


def _hex(span: ReadableSpan) -> tuple[str, str]:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


@pytest.fixture(scope="module")
def ui_jaeger(jaeger: JaegerEndpoints) -> JaegerEndpoints:
    jaeger_harness.require_jaeger_ui()
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"no headless browser: {reason}; CI must run the Jaeger UI tests", pytrace=False)
        pytest.skip(f"no headless browser: {reason}")
    assert jaeger.ui_assets is not None  # the session's Jaeger started before the UI was unpacked
    return jaeger


@pytest.fixture(scope="module")
def verdict(ui_jaeger: JaegerEndpoints) -> Verdict:
    """Run the example agent (processor on its provider) into Jaeger; pick its cross-trace UpdateError."""
    sys.path.insert(0, str(_EXAMPLES))
    try:
        import jaeger_writeback
    finally:
        sys.path.remove(str(_EXAMPLES))
    service = f"memtrace-ui-{uuid.uuid4().hex[:8]}"
    session = requests.Session()
    session.trust_env = False  # loopback only, whatever *_proxy says
    pipeline = jaeger_writeback.instrumented_provider(
        OTLPSpanExporter(endpoint=ui_jaeger.otlp_http_traces, timeout=10, session=session), service)
    reference = InMemorySpanExporter()
    pipeline.provider.add_span_processor(SimpleSpanProcessor(reference))
    agent = jaeger_writeback.new_agent(pipeline)
    jaeger_writeback.ingest(agent)
    assert pipeline.provider.force_flush(10_000)
    jaeger_writeback.ask(agent)
    pipeline.provider.shutdown()
    sent = list(reference.get_finished_spans())
    counts: dict[str, int] = {}
    for span in sent:
        counts[_hex(span)[0]] = counts.get(_hex(span)[0], 0) + 1
    for trace_id, count in sorted(counts.items()):
        wait_for_trace(ui_jaeger, trace_id, count)
    names = {_hex(span): span.name for span in sent}
    chosen = sorted(
        (dict(span.attributes or {}) for span in sent if span.name == AnnotationSpan.ATTRIBUTION
         and (span.attributes or {}).get(_A.ERROR_TYPE) == ErrorType.UPDATE
         and span.attributes[_A.ROOT_CAUSE_TRACE_ID] != _hex(span)[0]),
        key=lambda attributes: attributes[_A.EVALUATION_TRACE_ID])
    assert chosen, "the example agent makes an UpdateError blamed on ingestion: the walk is not vacuous"
    attributes = chosen[0]
    return Verdict(service, attributes,
                   names[(attributes[_A.ROOT_CAUSE_TRACE_ID], attributes[_A.ROOT_CAUSE_SPAN_ID])],
                   names[(attributes[_A.EVALUATION_TRACE_ID], attributes[_A.EVALUATION_SPAN_ID])])


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium(1400, 1000) as driver:
        yield driver


class _Walk:
    """The steps a user takes, each waiting for what the page renders (never a fixed sleep)."""

    def __init__(self, driver: Any, jaeger: JaegerEndpoints) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver, self.jaeger = driver, jaeger
        self.wait = WebDriverWait(driver, _WAIT)
        self.shots = os.environ.get(ENV_SCREENSHOTS)

    def find(self, xpath: str) -> Any:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        return self.wait.until(ec.visibility_of_element_located((By.XPATH, xpath)),
                               f"not on the page after {_WAIT:g} s: {xpath}")

    def click(self, xpath: str) -> Any:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        element = self.wait.until(ec.element_to_be_clickable((By.XPATH, xpath)),
                                  f"not clickable after {_WAIT:g} s: {xpath}")
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
        element.click()
        return element

    def screenshot(self, name: str) -> None:
        if self.shots:
            Path(self.shots).mkdir(parents=True, exist_ok=True)
            self.driver.save_screenshot(str(Path(self.shots) / f"jaeger-{name}.png"))

    def search(self, service: str, tags: str) -> None:
        from selenium.webdriver.common.keys import Keys

        self.driver.get(f"{self.jaeger.query_url}/search")
        self.click("//div[@name='service']")
        typed = self.driver.switch_to.active_element  # the select's search box
        typed.send_keys(service)
        typed.send_keys(Keys.ENTER)
        self.find(f"//div[@name='service']//*[@title='{service}']")
        self.find("//input[@name='tags']").send_keys(tags)
        self.click("//button[@data-test='submit-btn']")

    def open_span(self, operation: str) -> Any:
        """Open a span's details in the trace view (its row in the left column) and unfold its tags."""
        self.click(f"//*[contains(@class,'span-name')][.//*[normalize-space(.)='{operation}']"
                   f" or normalize-space(.)='{operation}']")
        self.click("//div[contains(@class,'AccordianKeyValues--header')][strong[normalize-space(.)='Tags:']]")
        return self.find("//*[contains(@class,'KeyValueTable')]")

    def tag_value(self, key: str) -> Any:
        """The value cell of ``key`` in the open span's tag table, scrolled into view (as a reader would)."""
        cell = self.find(f"//*[contains(@class,'KeyValueTable')]//tr[td[normalize-space(.)='{key}']]/td[2]"
                         "//*[contains(@class,'ub-inline-block')]")  # the value, not its Copy/JSON buttons
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", cell)
        return cell

    def first_tags(self) -> list[str]:
        """The keys of the open span's tag table, in the order shown."""
        rows = self.driver.find_elements(
            "xpath", "//*[contains(@class,'KeyValueTable')]//tr/td[1]")
        return [row.text.strip() for row in rows]

    def in_view(self, key: str) -> bool:
        """Whether ``key``'s row of the open span's tags is on screen as the span opened (no scrolling)."""
        row = self.find(f"//*[contains(@class,'KeyValueTable')]//tr[td[normalize-space(.)='{key}']]")
        return bool(self.driver.execute_script(
            "const r = arguments[0].getBoundingClientRect();"
            "return r.top >= 0 && r.bottom <= window.innerHeight;", row))

    def warnings(self) -> list[str]:
        """The open span's warnings section (Jaeger's clock-skew adjuster writes there), if any."""
        return [e.text for e in self.driver.find_elements(
            "xpath", "//*[contains(@class,'AccordianWarnings')]")]

    def follow(self, xpath: str) -> None:
        """Click a link that opens a new tab (link patterns and references do), and go to that tab."""
        before = set(self.driver.window_handles)
        self.click(xpath)
        self.wait.until(lambda driver: set(driver.window_handles) - before, "no new tab opened")
        (tab,) = set(self.driver.window_handles) - before
        self.driver.switch_to.window(tab)

    def highlighted(self) -> list[str]:
        """The names of the span rows the trace view highlights (its ``uiFind`` matches)."""
        rows = self.wait.until(
            lambda driver: driver.find_elements(
                "xpath", "//*[contains(@class,'span-row') and contains(@class,'is-matching-filter')]"),
            "no span highlighted")
        return [row.text for row in rows]


def test_from_the_failed_question_to_the_blamed_span(ui_jaeger: JaegerEndpoints, verdict: Verdict,
                                                    browser: Any) -> None:
    walk = _Walk(browser, ui_jaeger)
    evaluation_trace, _ = verdict.evaluation
    blamed_trace, blamed_span = verdict.root_cause

    # 1. Search the application's service by the error type; the failed question is among the results.
    walk.search(verdict.service, f"{_A.ERROR_TYPE}={ErrorType.UPDATE.value}")
    result = walk.find(f"//a[contains(@href, '/trace/{evaluation_trace}')]")
    walk.find(f"//a[contains(@href, '/trace/{blamed_trace}')]")  # the root-cause side is found too
    walk.screenshot("search")
    result.click()

    # 2. Open the attribution span: type, plain-words explanation, the blamed span's name as this UI
    #    lists it, first in the tag table and on screen as the span opens (the evidence path is a
    #    folded log, not a tag); no clock-skew warning.
    walk.find(f"//*[contains(., '{evaluation_trace[:7]}')]")
    walk.open_span(AnnotationSpan.ATTRIBUTION)
    key_tags = [_A.ERROR_TYPE, _A.EXPLANATION, _A.ROOT_CAUSE_SPAN_NAME]
    assert walk.first_tags()[:3] == key_tags
    assert [key for key in key_tags if not walk.in_view(key)] == []
    assert _A.EVIDENCE_PATH not in walk.first_tags()
    assert walk.warnings() == []
    walk.screenshot("attribution")
    assert walk.tag_value(_A.ROOT_CAUSE_SPAN_NAME).text == verdict.blamed_name
    explanation = walk.tag_value(_A.EXPLANATION).text
    assert explanation == verdict.attributes[_A.EXPLANATION]
    assert explanation.startswith(f'{ErrorType.UPDATE.value} in span "{verdict.blamed_name}"')
    assert " was lost here; it " in explanation  # what was lost, and where
    assert walk.tag_value(_A.ERROR_TYPE).text == ErrorType.UPDATE.value

    # 3a. The link pattern of collector/jaeger-ui.json on the root cause's trace id.
    link = walk.tag_value(_A.ROOT_CAUSE_TRACE_ID).find_element("xpath", "./ancestor::td[1]//a")
    assert link.get_attribute("href") == (f"{ui_jaeger.query_url}/trace/{blamed_trace}"
                                          f"?uiFind={blamed_span}")
    attribution_tab = browser.current_window_handle
    walk.follow(f"//*[contains(@class,'KeyValueTable')]//tr[td[normalize-space(.)='{_A.ROOT_CAUSE_TRACE_ID}']]"
                "/td[2]//a")
    assert f"/trace/{blamed_trace}" in browser.current_url
    assert any(verdict.blamed_name in row for row in walk.highlighted())
    walk.screenshot("root-cause-trace")

    # 3b. The FOLLOWS_FROM reference of the same span leads to the same place.
    browser.switch_to.window(attribution_tab)
    walk.click("//*[@role='switch'][starts-with(normalize-space(.), 'References')]")
    walk.follow(f"//*[contains(@class,'ReferencesList')]//a[contains(@href, '{blamed_trace}')]"
                f"[contains(., '{blamed_span}') or contains(@href, '{blamed_span}')]")
    assert f"/trace/{blamed_trace}" in browser.current_url and blamed_span in browser.current_url
    assert any(verdict.blamed_name in row for row in walk.highlighted())


def test_from_the_root_cause_back_to_the_failed_evaluation(ui_jaeger: JaegerEndpoints, verdict: Verdict,
                                                          browser: Any) -> None:
    walk = _Walk(browser, ui_jaeger)
    evaluation_trace, evaluation_span = verdict.evaluation
    blamed_trace, _ = verdict.root_cause

    walk.search(verdict.service, f"{_A.ERROR_TYPE}={ErrorType.UPDATE.value}")
    walk.click(f"//a[contains(@href, '/trace/{blamed_trace}')]")
    walk.open_span(AnnotationSpan.ROOT_CAUSE)
    assert walk.first_tags()[:3] == [_A.ERROR_TYPE, _A.EXPLANATION, _A.ROOT_CAUSE_SPAN_NAME]
    assert walk.warnings() == []
    assert walk.tag_value(_A.ROOT_CAUSE_SPAN_NAME).text == verdict.blamed_name
    assert walk.tag_value(_A.ERROR_TYPE).text == ErrorType.UPDATE.value

    walk.follow(f"//*[contains(@class,'KeyValueTable')]//tr[td[normalize-space(.)='{_A.EVALUATION_TRACE_ID}']]"
                "/td[2]//a")
    assert browser.current_url.endswith(f"/trace/{evaluation_trace}?uiFind={evaluation_span}")
    assert any(verdict.evaluation_name in row for row in walk.highlighted())
    walk.screenshot("failed-evaluation")


def test_serve_writes_its_annotations_under_the_applications_service(
        ui_jaeger: JaegerEndpoints, browser: Any, tmp_path: Path) -> None:
    """``memtrace serve`` (issue 25, item 4): a search of the APPLICATION's service by the error type
    finds the failed trace serve annotated, and the attribution span there is the application's
    service's, written by memtrace's scope, with its key tags first and no clock-skew warning."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    from scenario import run_pipeline
    from serve_harness import app_pipeline, await_stored, hex_ids, run_serve

    service = f"memtrace-serve-ui-{uuid.uuid4().hex[:8]}"
    with run_serve(tmp_path, grpc_port=-1, http_port=0, settle=1.0, backend_otlp=ui_jaeger.otlp_http,
                   jaeger_url=ui_jaeger.query_url) as serve:
        app = app_pipeline(f"{serve.http_url}/v1/traces", service)  # the Collector's tee, done by hand
        session = requests.Session()
        session.trust_env = False
        app.provider.add_span_processor(SimpleSpanProcessor(
            HttpExporter(endpoint=ui_jaeger.otlp_http_traces, timeout=10, session=session)))
        run_pipeline(app.provider, capture_content=True, store_id=f"ui-{uuid.uuid4().hex[:6]}")
        app.provider.shutdown()
        failed = [hex_ids(s)[0] for s in app.spans()
                  if (s.attributes or {}).get("memtrace.evaluation.passed") is False]
        assert failed, "the scenario's q1 fails: the test is not vacuous"
        await_stored(ui_jaeger, {failed[0]: 1}, [serve], name=AnnotationSpan.ATTRIBUTION)

    walk = _Walk(browser, ui_jaeger)
    walk.search(service, f"{_A.ERROR_TYPE}={ErrorType.UPDATE.value}")
    walk.click(f"//a[contains(@href, '/trace/{failed[0]}')]")
    walk.open_span(AnnotationSpan.ATTRIBUTION)
    assert walk.first_tags()[:3] == [_A.ERROR_TYPE, _A.EXPLANATION, _A.ROOT_CAUSE_SPAN_NAME]
    # the blamed span by the name Jaeger lists it under (its GenAI name), not the operation's ("update")
    assert walk.tag_value(_A.ROOT_CAUSE_SPAN_NAME).text == "update_memory"
    assert walk.tag_value("otel.scope.name").text == "memtrace_otel.writeback"
    assert walk.warnings() == []
    # the span's own service, in its detail header, is the application's
    walk.find(f"//*[contains(@class,'LabeledList--item')][contains(., 'Service')][contains(., '{service}')]")
    walk.screenshot("serve-attribution")
