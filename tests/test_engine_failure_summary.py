"""An engine that raises on many cases is one warning per run, not one per case (issue 24, item 10)."""

from __future__ import annotations

import logging

import networkx as nx
import pytest
from test_analyze_repeated_names import _repeated_graph

from memtrace_otel.attribution import Attribution, Engine, FailureCase
from memtrace_otel.attribution.runner import attribute_failures


class _Raising(Engine):
    name = "raising"

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        raise RuntimeError(f"bug on {case.case_id}")


def test_one_summary_line_per_run_and_each_case_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    G = _repeated_graph(2)  # twelve failed evaluations
    with caplog.at_level(logging.WARNING, logger="memtrace_otel"):
        verdicts = attribute_failures(G, _Raising())
    assert len(verdicts) == 12
    assert all((v.failure_reason or "").startswith("internal error: RuntimeError: bug on ") for v in verdicts)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("engine raising failed on 12 of 12 case(s) (first: RuntimeError: bug on ")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="memtrace_otel.attribution.base"):
        attribute_failures(G, _Raising())
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]) == 12


def test_the_summary_goes_to_the_callers_warn() -> None:
    said: list[str] = []
    attribute_failures(_repeated_graph(1), _Raising(), warn=said.append)
    assert len(said) == 1 and "failed on 6 of 6 case(s)" in said[0]
