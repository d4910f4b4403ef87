"""`memtrace bench build --llm`: the reference systems' LLM steps through the OpenAI-compatible client,
end to end against the scripted server on 127.0.0.1 (a stand-in for a model: no accuracy is claimed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("openai")

from memtrace_bench.score import GraphCache, find_case_evaluation
from memtrace_otel.cli import main
from memtrace_otel.semconv import GenAI, MemTrace
from memtrace_otel.spans.readers import read_span_files
from memtrace_otel.text import content_tokens

from openai_server import Reply, ScriptedOpenAIServer

MODEL = "scripted-reader"
_MEMORY = re.compile(r"^\[[^\]]*\] [^:]+: (.*)$", re.MULTILINE)


def _answer(user: str) -> Reply:
    """A lexical reader: the memory line sharing most words with the question, as the answer."""
    memories, question = user.rsplit("\n\nQuestion: ", 1)
    wanted = set(content_tokens(question))
    lines = _MEMORY.findall(memories)
    best = max(lines, key=lambda line: len(wanted & set(content_tokens(line))), default="")
    return Reply.text(best or "I don't know")


def _grade(user: str) -> Reply:
    gold = user.split("\nGold: ", 1)[1].split("\nAnswer: ", 1)[0]
    answer = user.rsplit("\nAnswer: ", 1)[1]
    wanted = set(content_tokens(gold))
    correct = bool(wanted) and len(wanted & set(content_tokens(answer))) >= max(1, len(wanted) // 2)
    return Reply.json({"correct": correct, "reason": "compared with the gold"})


def _script(body: dict[str, Any]) -> Reply:
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "grade" in system:
        return _grade(user)
    if "Extract" in system:
        parts = re.split(r"(?<=[.!?])\s+", user.split("): ", 1)[1])
        return Reply.json({"facts": [p.strip() for p in parts if len(p.split()) > 2]})
    if "memory manager" in system:
        return Reply.json({"event": "ADD", "reason": "new"})
    return _answer(user)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with ScriptedOpenAIServer(_script) as running:
        monkeypatch.setenv("MEMTRACE_OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("MEMTRACE_OPENAI_MODEL", MODEL)
        monkeypatch.delenv("MEMTRACE_OPENAI_API_KEY", raising=False)
        yield running


@pytest.mark.slow
def test_llm_build_runs_the_model_steps_and_its_cases_score(server: ScriptedOpenAIServer, locomo: str,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "llm"
    built = CliRunner().invoke(main, ["bench", "build", "--quick", "--llm", "--system", "mem0-style",
                                      "--conversation", "26", "--out", str(out), "--json"])
    assert built.exit_code == 0, built.output
    manifest = json.loads(built.stdout)
    assert set(manifest["components"].values()) >= {f"openai:{MODEL}"}
    assert manifest["settings"]["llm"] is True
    prompts = {body["messages"][0]["content"].split()[0] for body in server.requests}
    assert {"Answer", "You", "Extract"} <= prompts  # answerer, judge/decider, extractor all called
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    assert {label["part"] for label in labels} >= {"injected"}
    # Every case is a failed evaluation of its span files, and the model is on the generate spans.
    cache = GraphCache(str(out))
    for label in labels:
        G, problems = cache.get(label["spans"])
        assert not problems and find_case_evaluation(G, label["case_id"]) is not None, label["case_id"]
    spans = read_span_files([str(p) for p in (out / "spans").rglob("*.jsonl.gz")]).spans
    generate = [s for s in spans if s.attributes.get(MemTrace.OPERATION_NAME) == "mem0-style.generate"]
    assert generate and all(s.attributes.get(GenAI.REQUEST_MODEL) == MODEL for s in generate)
    # Fault and repair runs reuse the clean run's model replies: one call per message extracted,
    # although the fault runs re-ingest (many more extraction operations than calls).
    extracted = [body["messages"][-1]["content"] for body in server.requests
                 if body["messages"][0]["content"].startswith("Extract")]
    assert len(extracted) == len(set(extracted)) < sum(
        s.attributes.get(MemTrace.OPERATION_NAME) == "mem0.extract" for s in spans)
    scored = CliRunner().invoke(main, ["bench", "score", "--engine", "lineage", str(out), "--json"])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.stdout)["overall"]["cases"] == len(labels)
    # `bench repair` replays an --llm build through the same endpoint, and agrees with its label.
    natural = next(label for label in labels if label["part"] == "natural")
    repaired = CliRunner().invoke(main, ["bench", "repair", str(out), natural["case_id"], "--json"])
    assert repaired.exit_code == 0, repaired.output
    assert json.loads(repaired.stdout)["earliest"]["operation"] == natural["operation"]


def test_llm_build_without_an_endpoint_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    for name in ("MEMTRACE_OPENAI_BASE_URL", "MEMTRACE_OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(main, ["bench", "build", "--quick", "--llm", "--out", str(tmp_path / "x")])
    assert result.exit_code == 1 and "needs an endpoint" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "x").exists()


def test_llm_build_with_an_unreachable_endpoint_fails_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                  locomo: str, tmp_path: Path) -> None:
    with ScriptedOpenAIServer(lambda body: Reply.text("x")) as closed:
        url = closed.base_url
    monkeypatch.setenv("MEMTRACE_OPENAI_BASE_URL", url)  # nothing listens there any more
    result = CliRunner().invoke(main, ["bench", "build", "--quick", "--llm", "--system", "rag",
                                       "--out", str(tmp_path / "x")])
    assert result.exit_code == 1 and "--llm:" in result.output and "Traceback" not in result.output
