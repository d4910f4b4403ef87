"""The OpenAI-compatible steps against a local OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openai")

from memtrace_otel.systems.interfaces import ContextItem, Sentence
from memtrace_otel.systems.locomo import Turn
from memtrace_otel.systems.openai_steps import OpenAIAnswerer, OpenAIExtractor, OpenAIJudge


class _Handler(BaseHTTPRequestHandler):
    """Answers by the system prompt: a judge verdict, an extraction list, or an answer."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if "grade" in system:
            content = json.dumps({"correct": "Rex" in user.split("Answer:")[1], "reason": "compared"})
        elif "Extract" in system:
            content = '["Ann adopted a dog named Rex."]'
        else:
            content = "Rex" if "Rex" in user else "I don't know"
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": content}}],
                 "usage": {"prompt_tokens": len(user.split()), "completion_tokens": 2, "total_tokens": 0}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_steps_answer_judge_extract_with_usage(endpoint: str) -> None:
    options = {"base_url": endpoint, "model": "local", "api_key": "k"}
    context = [ContextItem("u1", [Sentence("D1:1", "Ann", "8 May 2023", "I adopted a dog named Rex.")])]
    answer = OpenAIAnswerer(**options).answer("What is Ann's dog called?", context)
    assert answer.text == "Rex" and answer.input_tokens > 0 and answer.output_tokens == 2
    judge = OpenAIJudge(**options)
    assert judge.judge("q", "Rex", "Rex").passed
    assert not judge.judge("q", "Max", "Rex").passed
    facts = OpenAIExtractor(**options).extract(Turn("D1:1", "Ann", "I adopted Rex!", 1, "8 May 2023"))
    assert [f.text for f in facts] == ["Ann adopted a dog named Rex."] and facts[0].dia_id == "D1:1"
