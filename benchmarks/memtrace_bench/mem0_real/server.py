"""The simulated LLM: an OpenAI-compatible HTTP server on 127.0.0.1 that errs like models serving mem0.

mem0 reaches it through the real ``openai`` client (``openai_base_url``). It answers:

* ``POST /v1/embeddings``: :func:`~.world.embed` of each input (offline, deterministic);
* ``POST /v1/chat/completions``, by what the prompt is:

  - mem0's fact extraction (1.x ``Input:\\nuser: ...``; 2.x's additive prompt with ``## New
    Messages``): the turn is located from the message text in the prompt (LoCoMo turns, searched
    from the last one located: the app adds them in order), and answered with the turn's
    third-person observation facts, seeded faults applied (omitted, lossy, swapped facts). 2.x
    leaves out facts its prompt's ``## Existing Memories`` already hold.
  - mem0 1.x's update decision (``The new retrieved facts ...``): the existing memories and new
    facts are read back out of the prompt; merge, NONE, ADD, with seeded wrong UPDATE targets,
    wrong DELETEs and lossy merges (:meth:`~.world.World.decision`).
  - the app's answer call (``Memories for user ...`` / ``Question: ...``): the reader rule.
  - the app's judge call (``Gold answer:`` / ``Generated answer:``): ``{"label": "CORRECT"|"WRONG"}``.

Every chat call is logged (:attr:`SimulatedLLM.calls`): its call id (``D3:5/extract``,
``D3:5/decide``, ``q12/answer``), the fault applied, what it damaged, and its oracle (fault-free)
answer; call ids in :attr:`SimulatedLLM.repaired` are answered by their oracle.
"""

from __future__ import annotations

import ast
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memtrace_bench.mem0_real.world import World, embed, judge
from memtrace_otel.text import short_date

__all__ = ["SimulatedLLM", "parse_answer_prompt", "parse_decision_prompt"]

_DECISION_MARK = "The new retrieved facts are mentioned in the triple backticks"
_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)


def parse_decision_prompt(prompt: str) -> tuple[list[tuple[str, str]], list[str]]:
    """mem0 1.x's update prompt -> ``([(id, text) of existing memories], [new facts])``.

    mem0 formats both as Python literals inside triple backticks, after its few-shot examples.

    >>> p = ("...examples...\\nBelow is the current content of my memory ...\\n```\\n"
    ...      "[{'id': '0', 'text': 'Likes tea'}]\\n```\\n" + _DECISION_MARK
    ...      + ".\\n```\\n['Likes coffee']\\n```")
    >>> parse_decision_prompt(p)
    ([('0', 'Likes tea')], ['Likes coffee'])
    """
    head, _, tail = prompt.rpartition(_DECISION_MARK)
    facts_block = _BLOCK.search(tail)
    facts = _literal(facts_block.group(1)) if facts_block else []
    existing: list[tuple[str, str]] = []
    marker = head.rfind("Below is the current content of my memory")
    if marker >= 0:
        block = _BLOCK.search(head[marker:])
        for item in _literal(block.group(1)) if block else []:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                existing.append((str(item.get("id")), item["text"]))
    return existing, [f for f in facts if isinstance(f, str)]


def _literal(text: str) -> list[Any]:
    text = text.strip()
    if text.startswith("json"):
        text = text[4:]
    for parse in (ast.literal_eval, json.loads):
        try:
            value = parse(text)
        except (ValueError, SyntaxError):
            continue
        return value if isinstance(value, list) else []
    return []


def parse_answer_prompt(prompt: str) -> tuple[str, list[str]]:
    """The app's answer prompt -> ``(question, memory lines)``.

    >>> parse_answer_prompt("Memories for user A:\\n- x\\n- y\\n\\nQuestion: Why?\\nAnswer:")
    ('Why?', ['x', 'y'])
    """
    question = re.search(r"^Question: (.*)$", prompt, re.MULTILINE)
    lines = [line[2:].strip() for line in prompt.splitlines() if line.startswith("- ")]
    return (question.group(1).strip() if question else ""), lines


class SimulatedLLM:
    """The server and its log. ``with SimulatedLLM(world) as llm: ... llm.base_url``."""

    def __init__(self, world: World, *, repaired: frozenset[str] = frozenset()) -> None:
        self.world = world
        self.repaired = set(repaired)
        self.calls: list[dict[str, Any]] = []
        self._turns = [t for s in world.conversation.sessions for t in s.turns]
        self._cursor = 0
        self._last_turn: str | None = None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> SimulatedLLM:
        handler = _handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def seek(self, dia_id: str) -> None:
        """Start locating turns at ``dia_id`` (a replay resumes mid-conversation)."""
        for index, turn in enumerate(self._turns):
            if turn.dia_id == dia_id:
                self._cursor = index
                return

    # -- answering -------------------------------------------------------------------------------
    def chat(self, messages: list[dict[str, Any]]) -> str:
        """The completion text for ``messages`` (serialised: mem0 and the app call one at a time)."""
        prompt = "\n\n".join(str(m.get("content", "")) for m in messages)
        with self._lock:
            if _DECISION_MARK in prompt:
                return self._decide(prompt)
            if "Generated answer:" in prompt:
                return self._judge(prompt)
            if "Memories for user" in prompt and "Question:" in prompt:
                return self._answer(prompt)
            if "## New Messages" in prompt:
                return self._extract(_section(prompt, "## New Messages"), prompt, generation=2)
            if "Input:" in prompt:
                return self._extract(prompt.rpartition("Input:")[2], prompt, generation=1)
            return json.dumps({"facts": []})

    def _locate(self, text: str) -> str | None:
        order = list(range(self._cursor, len(self._turns))) + list(range(self._cursor))
        for index in order:
            turn = self._turns[index]
            if turn.text and turn.text in text:
                self._cursor = index + 1
                return turn.dia_id
        return None

    def _log(self, call_id: str, kind: str, fault: str | None, returned: Any, oracle: Any,
             **extra: Any) -> None:
        self.calls.append({"call_id": call_id, "kind": kind, "fault": fault, "returned": returned,
                           "oracle": oracle, **extra})

    def _extract(self, section: str, prompt: str, *, generation: int) -> str:
        said = _unescape(section)
        dia_id = self._locate(said)
        self._last_turn = dia_id
        if dia_id is None:
            return json.dumps({"facts": []} if generation == 1 else {"memory": []})
        call_id = f"{dia_id}/extract"
        existing = ([m for _, m in _existing_v2(prompt)] if generation == 2 else None)
        turn = self.world.conversation.turn(dia_id)
        # Facts are dated only when the message says its date (the app puts it before the text).
        timed = turn is not None and short_date(said) == turn.date
        facts, oracle, fault = self.world.extraction(dia_id, call_id, existing=existing,
                                                     repaired=call_id in self.repaired, timed=timed)
        lost = [f for f in oracle if f not in facts]
        self._log(call_id, "extract", fault, facts, oracle, dia_id=dia_id, lost=lost)
        if generation == 1:
            return json.dumps({"facts": facts})
        return json.dumps({"memory": [{"text": f, "attributed_to": "user"} for f in facts]})

    def _decide(self, prompt: str) -> str:
        existing, facts = parse_decision_prompt(prompt)
        dia_id = self._last_turn or "unknown"
        call_id = f"{dia_id}/decide"
        decisions, oracle, fault = self.world.decision(existing, facts, call_id,
                                                       repaired=call_id in self.repaired)
        effect, lost = None, []
        if fault is not None:
            texts = dict(existing)
            changed = [d for d in decisions if d not in oracle]
            target = changed[0] if changed else None
            if target is not None:
                effect = {"event": target["event"], "text": target["text"], "record": target["id"]}
                lost = [texts.get(target["id"], "")]
        self._log(call_id, "decide", fault, decisions, oracle, dia_id=dia_id, effect=effect, lost=lost,
                  shown=len(existing))
        return json.dumps({"memory": decisions})

    def _answer(self, prompt: str) -> str:
        question, context = parse_answer_prompt(prompt)
        qa = self.world.question_by_text(question)
        if qa is None:
            return "I don't know."
        call_id = f"q{qa.index}/answer"
        answer, oracle, fault = self.world.answer(qa, context, call_id, repaired=call_id in self.repaired)
        self._log(call_id, "answer", fault, answer, oracle)
        return answer

    def _judge(self, prompt: str) -> str:
        gold = re.search(r"^Gold answer: (.*)$", prompt, re.MULTILINE)
        generated = re.search(r"^Generated answer: (.*)$", prompt, re.MULTILINE)
        passed = bool(gold and generated) and judge(generated.group(1), gold.group(1))  # type: ignore[union-attr]
        return json.dumps({"label": "CORRECT" if passed else "WRONG"})


def _section(prompt: str, title: str) -> str:
    """The text of the last ``## Title`` section, up to the next ``## `` (the system prompt before it
    may name the same titles)."""
    start = prompt.rfind(title)
    end = prompt.find("\n## ", start + len(title))
    return prompt[start + len(title): end if end > 0 else None]


def _unescape(text: str) -> str:
    """2.x serialises messages as JSON: read its strings back (quotes and non-ASCII kept)."""
    try:
        value = json.loads(text.strip())
    except ValueError:
        return text
    if isinstance(value, list):
        return "\n".join(str(m.get("content", m)) if isinstance(m, dict) else str(m) for m in value)
    return str(value)


def _existing_v2(prompt: str) -> list[tuple[str, str]]:
    section = _section(prompt, "## Existing Memories").strip()
    try:
        value = json.loads(section)
    except ValueError:
        value = _literal(section)
    items = value if isinstance(value, list) else []
    return [(str(i.get("id")), i["text"]) for i in items
            if isinstance(i, dict) and isinstance(i.get("text"), str)]


def _handler(llm: SimulatedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "body is not JSON"}})
                return
            if self.path.endswith("/embeddings"):
                raw = body.get("input")
                inputs = [raw] if isinstance(raw, str) else [str(x) for x in raw or ()]
                data = [{"object": "embedding", "index": i, "embedding": embed(t)}
                        for i, t in enumerate(inputs)]
                self._send(200, {"object": "list", "model": body.get("model", "sim"), "data": data,
                                 "usage": {"prompt_tokens": 1, "total_tokens": 1}})
                return
            if self.path.endswith("/chat/completions"):
                text = llm.chat(body.get("messages") or [])
                self._send(200, {
                    "id": "chatcmpl-sim", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "sim"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
                return
            self._send(404, {"error": {"message": f"no route {self.path}"}})

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
