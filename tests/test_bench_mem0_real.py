"""The real-mem0 benchmark part: the simulated LLM without mem0, and a small build with it.

The unit tests need only LoCoMo. The build runs the real mem0ai 1.0.11 in its venv
(``.ci/install-mem0-venvs.sh``): absent, it skips with the reason (fails under CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from memtrace_bench.config import locomo_dir
from memtrace_bench.locomo import QA
from memtrace_bench.mem0_real.build import (
    BuildOptions,
    also_passing,
    build,
    damages,
    default_mem0_python,
    error_type_of,
)
from memtrace_bench.mem0_real.server import SimulatedLLM, parse_answer_prompt, parse_decision_prompt
from memtrace_bench.mem0_real.world import (
    World,
    carries,
    dated,
    embed,
    judge,
    message_text,
    relative_times,
    sentences,
    similarity,
    statement,
    undated,
)
from memtrace_bench.score import CaseResult, summarize

pytestmark = pytest.mark.skipif(not os.path.isfile(os.path.join(locomo_dir(), "26.json")),
                                reason="LoCoMo conversation 26 not found")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def world() -> World:
    return World.load("26", seed=0, max_sessions=6)


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _chat(llm: SimulatedLLM, prompt: str) -> str:
    messages = [{"role": "user", "content": prompt}]
    body = _post(f"{llm.base_url}/chat/completions", {"model": "m", "messages": messages})
    return str(body["choices"][0]["message"]["content"])


def test_extraction_returns_the_turns_observation_facts_not_its_words(world: World) -> None:
    turn = world.conversation.turn("D1:3")
    assert turn is not None
    said = message_text(world.when[1], turn.speaker, turn.text)
    with SimulatedLLM(world) as llm:
        facts = json.loads(_chat(llm, f"Extract facts as json.\n\nInput:\nuser: {said}\n"))["facts"]
    assert facts == world.facts["D1:3"]
    assert all(fact not in turn.text for fact in facts)  # third-person paraphrase
    (call,) = llm.calls
    assert call["call_id"] == "D1:3/extract" and call["oracle"] == facts


def test_extraction_resolves_relative_times_only_against_a_date_the_message_gives(world: World) -> None:
    turn = world.conversation.turn("D1:3")  # "I went to a LGBTQ support group yesterday" on 8 May 2023
    assert turn is not None and "yesterday" in turn.text and turn.date == "8 May 2023"
    assert world.stamps["D1:3"] == "7 May 2023"
    assert all(fact.endswith("(7 May 2023).") for fact in world.facts["D1:3"])
    dated_facts, _, _ = world.extraction("D1:3", "D1:3/extract", repaired=True)
    undated_facts, _, _ = world.extraction("D1:3", "D1:3/extract", repaired=True, timed=False)
    assert dated_facts == world.facts["D1:3"] and undated_facts == world.base["D1:3"]
    with SimulatedLLM(world) as llm:  # no date in the message: the model cannot resolve "yesterday"
        facts = json.loads(_chat(llm, f"Extract facts as json.\n\nInput:\nuser: {turn.text}\n"))["facts"]
    assert facts == world.base["D1:3"] and not any("2023" in fact for fact in facts)
    # A turn without a relative time: its facts carry the day it was said.
    plain = next(t for s in world.conversation.sessions for t in s.turns
                 if t.dia_id in world.facts and not relative_times(t.text, t.date))
    assert world.stamps[plain.dia_id] == plain.date


def test_extraction_faults_are_seeded_kinds_and_repair_gives_the_oracle(world: World) -> None:
    kinds: dict[str, int] = {}
    ids = [d for d, facts in world.facts.items() if facts]
    for dia_id in ids:
        call_id = f"{dia_id}/extract"
        facts, oracle, fault = world.extraction(dia_id, call_id)
        assert (facts, oracle, fault) == world.extraction(dia_id, call_id)  # deterministic
        assert world.extraction(dia_id, call_id, repaired=True) == (oracle, oracle, None)
        # What a model that summarises writes: the observation sentences, dated.
        clean = [dated(f, world.stamps.get(dia_id, "")) for f in world.observed.get(dia_id, [])]
        assert (clean != oracle) == ("omitted-by-observation" in (fault or ""))
        seeded = [f for f in (fault or "").split("; ") if f and f != "omitted-by-observation"]
        if not seeded:
            assert facts == clean
            continue
        (seeded_fault,) = seeded
        kinds[seeded_fault.split()[0]] = kinds.get(seeded_fault.split()[0], 0) + 1
        lost = [f for f in clean if not any(carries(m, f) for m in facts)]
        assert len(lost) == 1  # one fact omitted or damaged, the others intact
        if seeded_fault.startswith(("dropped date", "wrong date")):  # the sentence kept, its date lost
            (damaged,) = [f for f in facts if f not in clean]
            assert carries(undated(damaged), undated(lost[0])) and carries(undated(lost[0]), undated(damaged))
    assert set(kinds) == {"omitted", "lossy", "swapped", "dropped", "wrong"}
    assert sum(kinds.values()) < 0.35 * len(ids)  # a modest rate


def test_decision_merges_keeps_duplicates_and_seeds_wrong_targets(world: World) -> None:
    existing = [("0", "Caroline attended an LGBTQ support group recently."), ("1", "Melanie likes pottery.")]
    new = ["Melanie likes pottery.", "Caroline found the LGBTQ support group inspiring."]
    _, oracle, _ = world.decision(existing, new, "x/decide", repaired=True)
    assert [d["event"] for d in oracle] == ["NONE", "UPDATE"]
    assert carries(oracle[1]["text"], existing[0][1])
    assert carries(oracle[1]["text"], "found the LGBTQ support")
    seen: dict[str, int] = {}
    many = existing + [(str(i), f"Caroline has hobby number {i} in town.") for i in range(2, 8)]
    for n in range(400):
        facts = ["Melanie went camping with her kids.", "Caroline found the LGBTQ support group inspiring."]
        made, oracle, fault = world.decision(many, facts, f"D{n}/decide")
        if fault:
            seen[fault.split(" ")[0] + " " + fault.split(" ")[1]] = 1
            assert made != oracle
    assert set(seen) == {"wrong UPDATE", "wrong DELETE", "lossy merge"}


def test_reader_answers_from_context_and_errs_only_when_seeded(world: World) -> None:
    qa = next(q for q in world.questions() if world.answerable(q) and len(q.evidence) == 1)
    keys = [fact for _, fact in world.key_facts(qa)]
    answer, oracle, fault = world.answer(qa, ["Something else entirely.", *keys], "q/answer", repaired=True)
    assert answer == oracle == str(qa.answer) and fault is None
    missing, _, fault = world.answer(qa, ["Something else entirely."], "q/answer")
    assert not judge(missing, str(qa.answer)) and fault is None
    faults = [world.answer(qa, keys, f"q{n}/answer")[2] for n in range(300)]
    assert 0 < faults.count("reader mistake") < 60


def test_reader_answers_from_what_the_context_says(world: World) -> None:
    by_text = {q.question: q for q in world.questions()}
    # Temporal: the key fact must say the right date; a wrong date fails, the timestamp line helps.
    when = by_text["When did Caroline go to the LGBTQ support group?"]
    (dia_id, key), = world.key_facts(when)
    assert world.stated(when) and key.endswith("(7 May 2023).")
    wrong_day = key.replace("7 May 2023", "30 April 2023")
    assert world.answer(when, [key], "t/answer", repaired=True)[0] == "7 May 2023"
    assert world.answer(when, [wrong_day], "t/answer", repaired=True)[0] != "7 May 2023"
    assert world.answer(when, [undated(key)], "t/answer", repaired=True)[0] != "7 May 2023"
    # Not temporal: the answer's words matter, a wrong date or a lost side phrase does not.
    what = by_text["What did Caroline research?"]
    (dia_id, key), = world.key_facts(what)
    assert world.stated(what)
    side = key.replace("(", "(1 January 2020; ").replace(" with the dream of having a family", "")
    assert side != key and world.answer(what, [side], "t/answer", repaired=True)[0] == str(what.answer)
    other = key.replace("Caroline", "Melanie")  # the other speaker's fact does not answer
    assert world.answer(what, [other], "t/answer", repaired=True)[0] != str(what.answer)
    # The evidence id names the photo turn; the reply next to it says the answer (2022).
    sunrise = by_text["When did Melanie paint a sunrise?"]
    (dia_id, key), = world.key_facts(sunrise)
    assert sunrise.evidence == ("D1:12",) and dia_id != "D1:12" and "(2022)" in key
    assert world.relevant(sunrise, f"1:56 pm on 8 May, 2023: {key}")


def test_label_candidates_are_the_faults_that_lost_what_the_reader_answers_from(world: World) -> None:
    what = next(q for q in world.questions() if q.question == "What did Caroline research?")
    (_, key), = world.key_facts(what)

    def deleted(memory: str) -> dict[str, Any]:
        return {"call_id": "D2:9/decide", "kind": "decide", "fault": "wrong DELETE 0", "lost": [memory]}

    assert damages(world, what, deleted(key))
    # The deleted memory held the key fact's words with another date and a side phrase dropped: not
    # the sentence whole, but the reader answers from it, so repairing the delete may pass.
    side = key.replace("(", "(1 January 2020; ").replace(" with the dream of having a family", "")
    assert not carries(side, key) and damages(world, what, deleted(side))
    # A memory of another turn stating the gold is read as well.
    stating = "Caroline did research on adoption agencies (1 June 2023)."
    assert not carries(stating, key) and damages(world, what, deleted(stating))
    assert not damages(world, what, deleted("Melanie painted a lake at sunrise (8 May 2023)."))
    # An extraction whose written fact still answers for what it lost damaged nothing of the question
    # (a later repair's pass would be a cascade); one that wrote nothing answering did.
    extract = {"call_id": "D2:9/extract", "kind": "extract", "fault": "lossy fact 0", "lost": [key]}
    assert not damages(world, what, {**extract, "returned": [side]})
    assert damages(world, what, {**extract, "returned": [key.replace("adoption agencies", "things")]})
    assert not damages(world, what, deleted(key.replace("Caroline", "Melanie")))


def test_the_oracle_extraction_keeps_what_the_message_states_that_the_observation_left_out(
        world: World) -> None:
    # "A friend made it for my 18th birthday ten years ago": LoCoMo's observation keeps the bowl, not
    # the "ten years" the gold needs. The fault-free extraction keeps the message's sentence.
    birthday = next(q for q in world.questions()
                    if q.question == "How long ago was Caroline's 18th birthday?")
    (dia_id, key), = world.key_facts(birthday)
    (observed,) = world.observed["D4:5"]
    assert dia_id == "D4:5" and "ten years ago" in key and "ten years" not in observed
    assert key.startswith(observed.rstrip("."))
    assert "Caroline said that a friend made it for Caroline's" in key
    facts, oracle, fault = world.extraction("D4:5", "D4:5/extract")
    assert fault == "omitted-by-observation" and oracle == [key] and not any(carries(f, key) for f in facts)
    assert world.extraction("D4:5", "D4:5/extract", repaired=True)[0] == [key]
    # The summarised fact does not answer; the fuller one does; the lost fuller fact is a label candidate.
    assert world.answer(birthday, facts, "t/answer", repaired=True)[0] != str(birthday.answer)
    assert world.answer(birthday, [key], "t/answer", repaired=True)[0] == str(birthday.answer)
    call = {"call_id": "D4:5/extract", "kind": "extract", "fault": fault, "lost": [key]}
    assert damages(world, birthday, call) and error_type_of(call) == "ExtractionError"
    # A sentence sharing one gold word and nothing of the question is not taken (a caption's "woman"
    # for "What is Caroline's identity?"); turns whose observation keeps the gold are unchanged.
    assert world.base["D1:5"] == world.observed["D1:5"] and world.base["D1:3"] == world.observed["D1:3"]
    # The workshop's observation keeps all but "best" of "therapeutic methods and how to best work with
    # trans people" (with its neighbours): a reader answers from it, so the oracle adds nothing.
    assert world.base["D4:13"] == world.observed["D4:13"]
    # "When did Caroline have a picnic?": the date is kept, the event is not; the oracle keeps it.
    picnic = next(q for q in world.questions() if q.question == "When did Caroline have a picnic?")
    (_, key), = world.key_facts(picnic)
    assert "picnic" not in world.observed["D6:11"][0] and "had a picnic last week" in key
    assert statement("Mel", "Caro", "You're doing great, I ran a race!") == (
        "Mel said that Caro is doing great, Mel ran a race.")
    assert sentences("Wow! [shares a photo of a cake] Yum.") == ["Wow!", "[shares a photo of a cake]", "Yum."]


def test_a_key_fact_keeps_only_the_sentences_kept_for_its_own_question(world: World) -> None:
    # D4:15's fuller fact keeps two of the message's sentences for "What kind of place does Caroline
    # want to create for people?"; "Would Caroline still want to pursue counseling ...?" states no
    # gold word, so its reader needs its key fact whole: the observation, not the sentences kept for
    # the other question.
    would = next(q for q in world.questions()
                 if q.question.startswith("Would Caroline still want to pursue"))
    place = next(q for q in world.questions()
                 if q.question == "What kind of place does Caroline want to create for people?")
    (observed,) = [dated(o, world.stamps["D4:15"]) for o in world.observed["D4:15"]]
    (whole,) = world.facts["D4:15"]
    keys = dict(world.key_facts(would))
    dia_id, key, other = "D4:15", keys["D4:15"], keys["D3:5"]
    assert key == observed != whole and world.needed(would, dia_id, key) is None
    assert "safe, inviting place" in whole and "safe, inviting place" not in key
    assert world.key_facts(place) == [("D4:15", whole)]  # the question they were kept for reads them
    # The fault-free extraction still writes the fuller fact.
    assert world.extraction("D4:15", "D4:15/extract", repaired=True)[0] == [whole]
    # The observation answers the question, so does the fuller fact, or a merge holding it; a lossy
    # observation does not.
    gold = str(would.answer)
    for memory in (observed, whole, f"Melanie went camping (8 May 2023); {whole}"):
        assert world.holds(memory, dia_id, key)
        assert world.answer(would, [memory, other], "t/answer", repaired=True)[0] == gold
    cut = observed.replace(", the support she received", "")
    assert not world.relevant(would, cut)
    assert world.answer(would, [cut, other], "t/answer", repaired=True)[0] != gold
    # An extraction that wrote the observation but lost the fuller fact damaged nothing of this
    # question; one that wrote a lossy observation, or nothing, did.
    call = {"call_id": "D4:15/extract", "kind": "extract", "fault": "omitted-by-observation",
            "lost": [whole]}
    assert not damages(world, would, {**call, "returned": [observed]})
    assert damages(world, would, {**call, "returned": [cut]})
    assert damages(world, would, {**call, "returned": []})


def test_a_date_answers_only_with_the_event_the_question_asks(world: World) -> None:
    when = next(q for q in world.questions()
                if q.question == "When did Caroline go to the LGBTQ support group?")
    (_, key), = world.key_facts(when)
    # The whole date and a name and "support group" of another group: not the event asked.
    other = "Caroline left a parents' support group (7 May 2023)."
    assert not world.states(when, other) and not world.relevant(when, other)
    assert world.answer(when, [other], "t/answer", repaired=True)[0] != str(when.answer)
    same = "Caroline went to an LGBTQ support group (7 May 2023)."
    assert world.states(when, same)
    assert world.answer(when, [same], "t/answer", repaired=True)[0] == "7 May 2023"
    assert world.event(when, key) == frozenset({"caroline", "lgbtq", "support", "group"})
    # A question sharing only the speaker's name with its key fact: the fact's own words are the event.
    vague = QA(10_000, "When did Caroline do it?", "7 May 2023", ("D1:3",), 2)
    assert world.event(vague, key) >= {"caroline", "attend", "lgbtq", "support", "group"}
    assert not world.states(vague, "Caroline painted a lake (7 May 2023).")


def test_labels_record_the_other_passing_repairs_and_the_scorer_reports_them_apart() -> None:
    search = {"call_id": "q3/search/Jon", "kind": "search", "fault": None,
              "span": {"span_id": "b2", "name": "mem0.search", "trace_id": "t"}}
    (other,) = also_passing([search, {"call_id": "q3/search/Gina", "kind": "search", "span": None}])
    assert other == {"call_id": "q3/search/Jon", "error_type": "RetrievalError", "fault": None,
                     "name": "mem0.search", "span_id": "b2"}
    results = [CaseResult("a", "mem0", "RetrievalError", "b1", "RetrievalError", "b2", also_passing=["b2"]),
               CaseResult("b", "mem0", "RetrievalError", "c1", "RetrievalError", "c1", also_passing=[]),
               CaseResult("c", "mem0", "ResponseError", "d1", "RetrievalError", "d9", also_passing=["d2"])]
    overall = summarize(results, "x")["overall"]
    assert overall["operation_accuracy"] == 1 / 3 and overall["diagnostic_any_passing_repair_share"] == 2 / 3
    plain = summarize([CaseResult("d", "s", "RetrievalError", "1")], "x")["overall"]
    assert "diagnostic_any_passing_repair_share" not in plain


def test_prompt_parsers_and_embedding() -> None:
    existing, facts = parse_decision_prompt(
        "examples ```[{'id': '9', 'text': 'no'}]```\nBelow is the current content of my memory which ...\n"
        "```\n[{'id': '0', 'text': 'Likes tea'}]\n```\nThe new retrieved facts are mentioned in the triple "
        "backticks.\n```\n['Likes coffee']\n```")
    assert (existing, facts) == ([("0", "Likes tea")], ["Likes coffee"])
    assert parse_answer_prompt("Memories for user A:\n- x\n\nQuestion: Who?\nAnswer:") == ("Who?", ["x"])
    question = embed("When did Caroline go to the LGBTQ support group?")
    paraphrase = embed("Caroline attended an LGBTQ support group recently.")
    other = embed("Melanie painted a lake sunrise last year.")
    assert sum(a * b for a, b in zip(question, paraphrase, strict=True)) > \
        sum(a * b for a, b in zip(question, other, strict=True))
    assert similarity("a b", "") == 0.0


def test_error_types_follow_what_the_call_did() -> None:
    assert error_type_of({"kind": "extract", "fault": "omitted fact 0"}) == "ExtractionError"
    assert error_type_of({"kind": "decide", "fault": "wrong UPDATE target 1"}) == "UpdateError"
    assert error_type_of({"kind": "decide", "fault": "lossy merge 1"}) == "UpdateError"
    assert error_type_of({"kind": "decide", "fault": "wrong DELETE 1"}) == "DeletionError"
    assert error_type_of({"kind": "search"}) == "RetrievalError"
    assert error_type_of({"kind": "answer"}) == "ResponseError"


def test_cli_says_in_one_line_what_is_missing(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from memtrace_otel.cli import main

    runner = CliRunner()
    done = runner.invoke(main, ["bench", "mem0", "--out", str(tmp_path / "b"), "--mem0-python",
                                str(tmp_path / "none" / "python")])
    assert done.exit_code == 1 and "no mem0 venv python at" in done.output
    assert "Traceback" not in done.output and len(done.output.strip().splitlines()) == 1
    done = runner.invoke(main, ["bench", "mem0", "--out", str(tmp_path / "b"), "--mem0-python", __file__,
                                "--conversation", "999"])
    assert done.exit_code == 1 and "LoCoMo conversation 999 not found" in done.output
    assert not (tmp_path / "b").exists()


def _mem0_python() -> str:
    python = default_mem0_python()
    if not os.path.isfile(python):
        message = f"no mem0ai 1.0.11 venv at {python} (bash .ci/install-mem0-venvs.sh)"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must install it")
        pytest.skip(message)
    return python


def _ask(python: str, work: Path, trials: list[tuple[int, list[str]]], repairs: list[str]) -> list[bool]:
    """A fresh run from session 1 (no snapshot): ``repairs`` in ingestion, then each trial's question
    with its own repairs."""
    work.mkdir()
    (work / "trials.json").write_text(json.dumps(trials))
    result = work / "result.json"
    command = [python, "-m", "memtrace_bench.mem0_real.driver", "--conversation", "26",
               "--max-sessions", "6", "--data", str(work / "data"), "--result", str(result),
               "--trials", str(work / "trials.json")]
    for call_id in repairs:
        command += ["--repair", call_id]
    env = {**os.environ, "MEM0_TELEMETRY": "False"}
    subprocess.run(command, check=True, capture_output=True, env=env, cwd=ROOT, timeout=300)
    return [bool(answer["passed"]) for answer in json.loads(result.read_text())["answers"]]


@pytest.mark.slow
def test_small_build_is_deterministic_and_each_label_is_a_real_repair(tmp_path: Path) -> None:
    python = _mem0_python()
    manifests, texts = [], []
    for name in ("a", "b"):
        options = BuildOptions(str(tmp_path / name), python, ["26"], seed=0, max_sessions=6, jobs=2)
        manifests.append(build(options))
        texts.append((tmp_path / name / "labels.jsonl").read_text())
    assert texts[0] == texts[1] and texts[0]
    labels = [json.loads(line) for line in texts[0].splitlines()]
    assert manifests[0]["labels"] == len(labels)
    assert {label["part"] for label in labels} == {"mem0-real-v1"}
    rows = {json.loads(line)["case_id"]: json.loads(line)
            for line in (tmp_path / "a" / "mem0_real_failures.jsonl").read_text().splitlines()}
    for label in labels:
        assert label["operation"]["span_id"] and (tmp_path / "a" / label["spans"][0]).is_file()
        # The other passing single repairs are listed, the label (the earliest) not among them.
        passing = rows[label["case_id"]]["repair"]["passing"]
        assert passing[0] == label["repair"]["target"]
        assert [other["call_id"] for other in label["also_passing"]] == passing[1:]
    # One label per error type, checked on fresh runs from the first session (no store snapshot):
    # with its repair the answer passes, without any repair it fails.
    checked = {}
    for label in labels:
        checked.setdefault(label["error_type"], label)
    assert {"ExtractionError", "RetrievalError"} <= set(checked)
    questions = [int(label["case_id"].rsplit("q", 1)[1]) for label in checked.values()]
    assert not any(_ask(python, tmp_path / "plain", [(q, []) for q in questions], []))
    pairs = list(zip(questions, checked.values(), strict=True))
    query_side = [(q, [label["repair"]["target"]]) for q, label in pairs
                  if label["repair"]["target"].startswith("q")]
    assert all(_ask(python, tmp_path / "query-side", query_side, []))
    for number, (question, label) in enumerate(pairs):
        target = label["repair"]["target"]
        if not target.startswith("q"):
            (restored,) = _ask(python, tmp_path / f"ingestion-{number}", [(question, [])], [target])
            assert restored, f"{target} does not restore {label['case_id']}"
