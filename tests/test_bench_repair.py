"""Counterfactual repair: natural failures labelled by the earliest operation whose repair alone restores
the answer (quick-sized data, seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memtrace_bench import repair as repair_module
from memtrace_bench.build import build, quick_config, replayable
from memtrace_bench.repair import check_verdict, question_repair, repair_question, replay
from memtrace_bench.score import GraphCache, find_case_evaluation
from memtrace_otel.cli import main


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory, locomo: str) -> Path:
    out = tmp_path_factory.mktemp("repair")
    build(quick_config(str(out)))
    return out


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _replayable(quick: Path, system: str, tmp_path: Path):
    config = quick_config(str(tmp_path))
    return replayable(config, system, "26")


def test_the_labelled_repair_restores_the_answer_and_the_plain_replay_does_not(quick: Path,
                                                                             tmp_path: Path) -> None:
    natural = [r for r in _rows(quick / "labels.jsonl") if r["part"] == "natural"]
    assert natural
    checked = set()
    for label in natural:
        if label["system"] in checked:
            continue
        checked.add(label["system"])
        run, questions = _replayable(quick, label["system"], tmp_path / label["system"])
        qa = questions[label["case_id"]]
        target = label["repair"]["target"]
        losses = [x for x in repair_module.candidates(run, qa, label["case_id"]) if x.ordinal == target]
        assert len(losses) == 1 and losses[0].span == label["operation"]
        session = losses[0].session
        fixed, _ = replay(run, qa, label["case_id"], question_repair(run, qa, target), session=session)
        plain, _ = replay(run, qa, label["case_id"], question_repair(run, qa, None), session=session)
        assert fixed.passed and not plain.passed, label["case_id"]
        assert plain.prediction == label["prediction"]
    assert len(checked) >= 3


def test_each_natural_label_names_a_clean_span_before_the_failed_evaluation(quick: Path) -> None:
    cache = GraphCache(str(quick))
    for label in (r for r in _rows(quick / "labels.jsonl") if r["part"] == "natural"):
        G, problems = cache.get(label["spans"])
        assert not problems
        evaluation = find_case_evaluation(G, label["case_id"])
        op = f"op:{label['operation']['trace_id']}:{label['operation']['span_id']}"
        assert evaluation is not None and op in G, label["case_id"]
        assert G.nodes[op]["order"] < G.nodes[evaluation]["order"]


def test_not_single_cause_failures_are_counted_and_kept_apart(quick: Path) -> None:
    manifest = json.loads((quick / "manifest.json").read_text())
    counts = manifest["natural_repair"]
    tried = [r for r in _rows(quick / "natural_failures.jsonl") if "repair" in r]
    statuses = [r["repair"]["status"] for r in tried]
    assert counts["tried"] == len(tried) == counts["single_cause"] + counts["not_single_cause"]
    assert counts["not_single_cause"] == statuses.count("not-single-cause") > 0
    labelled = {r["case_id"] for r in _rows(quick / "labels.jsonl") if r["part"] == "natural"}
    assert len(labelled) == counts["single_cause"] == manifest["parts"]["natural"]
    for row in tried:
        restored = [a for a in row["repair"]["attempts"] if a["restored"]]
        assert (row["case_id"] in labelled) == bool(restored)
        assert all(not a["restored"] for a in row["repair"]["attempts"][:-1])  # stopped at the first


def test_the_earliest_restoring_repair_is_chosen(quick: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    found = None
    for system in ("mem0-style", "episodic", "rag", "long-context"):
        run, questions = _replayable(quick, system, tmp_path / system)
        found = next(((case_id, qa, losses) for case_id, qa in questions.items()
                      if len(losses := repair_module.candidates(run, qa, case_id)) >= 2), None)
        if found is not None:
            break
    assert found is not None, "no question with two candidate operations"
    case_id, qa, losses = found
    real = repair_module.replay
    # Every candidate but the first restores (a stand-in for the system's answer after each repair):
    # the earliest of those must be chosen, not the first tried nor the last.
    restoring = {loss.ordinal for loss in losses[1:]}

    def answer(run_, qa_, case_, repair, *, session=None):
        outcome, asked = real(run_, qa_, case_, repair, session=session)
        outcome.passed = repair.target in restoring
        return outcome, asked

    monkeypatch.setattr(repair_module, "replay", answer)
    outcome = repair_question(run, qa, case_id, exhaustive=True)
    assert [a.target for a in outcome.attempts] == [loss.ordinal for loss in losses]
    assert outcome.earliest is not None and outcome.earliest.target == losses[1].ordinal
    assert check_verdict(outcome, losses[1].span["span_id"]) == "earliest"
    if len(losses) > 2:
        assert check_verdict(outcome, losses[2].span["span_id"]) == "restores-later"
    assert check_verdict(outcome, losses[0].span["span_id"]) == "does-not-restore"


def test_cli_repair_checks_an_engine_verdict(quick: Path) -> None:
    label = next(r for r in _rows(quick / "labels.jsonl") if r["part"] == "natural")
    result = CliRunner().invoke(main, ["bench", "repair", str(quick), label["case_id"], "--engine",
                                       "last-operation", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["earliest"]["operation"] == label["operation"]
    expected = "earliest" if label["error_type"] == "ResponseError" else "not-a-candidate"
    assert report["engine"]["verdict"] in (expected, "does-not-restore", "restores-later")
    bad = CliRunner().invoke(main, ["bench", "repair", str(quick), "../x"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    unsingle = next(r for r in _rows(quick / "natural_failures.jsonl")
                    if r.get("repair", {}).get("status") == "not-single-cause")
    result = CliRunner().invoke(main, ["bench", "repair", str(quick), unsingle["case_id"]])
    assert result.exit_code == 3 and "not single-cause" in result.output


def test_distractor_gold_is_the_decisive_fault_and_the_decoy_alone_is_harmless(quick: Path,
                                                                             tmp_path: Path) -> None:
    from memtrace_bench.build import BuildConfig, _Job
    from memtrace_bench.compound import fault_for
    from memtrace_bench.faults import inject

    cases = [r for r in _rows(quick / "labels.jsonl") if r["part"] == "distractor"]
    assert cases
    for label in cases:
        roles = {f["role"]: f for f in label["faults"]}
        assert set(roles) == {"gold", "decoy"}, label["case_id"]
        assert roles["gold"]["operation"] == label["operation"]
        assert roles["gold"]["error_type"] == label["error_type"] != roles["decoy"]["error_type"]
        assert roles["decoy"]["dia_id"] not in label["evidence"]
    # Rebuild one: the decoy alone leaves the answer right, both together break it.
    label = cases[0]
    config = BuildConfig(out=str(tmp_path), conversations=["26"], max_sessions=8, jobs=1)
    job = _Job(config, label["system"], "26")
    outcomes = {o.case_id: o for o in job.clean_run()}
    base = "/".join(label["case_id"].split("/")[:3])
    qa = {job.case_id(q): q for q in job.conversation.questions}[base]
    roles = {f["role"]: f for f in label["faults"]}
    decoy_source = next(o for o in outcomes.values() if o.passed and o.source is not None
                        and o.source.dia_id == roles["decoy"]["dia_id"])
    from memtrace_otel.semconv import ErrorType

    seed = job.derive(label["case_id"])
    gold = fault_for(ErrorType(label["error_type"]), outcomes[base], label["case_id"], seed)
    decoy = fault_for(ErrorType(roles["decoy"]["error_type"]), decoy_source, label["case_id"], seed)
    args = (job.cls, job.conversation, job.components, job.snapshots, job.final, qa)
    assert inject(*args, decoy, seed=seed, service=job.service).outcome.passed
    both = inject(*args, gold, seed=seed, service=job.service, extra=[decoy])
    assert not both.outcome.passed and both.fired[0][1]["span_id"] in {
        label["operation"]["span_id"], roles["decoy"]["operation"]["span_id"]}


def test_several_faults_on_one_sentence_the_first_to_fire_is_the_gold(quick: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    from memtrace_bench.build import BuildConfig, _Job
    from memtrace_bench.compound import fault_for
    from memtrace_bench.faults import inject
    from memtrace_otel.semconv import ErrorType

    job = _Job(BuildConfig(out=str(tmp_path), conversations=["26"], max_sessions=8, jobs=1), "rag", "26")
    job.run()
    checked = 0
    for item in job.decisive.values():
        if not {ErrorType.RETRIEVAL, ErrorType.RESPONSE} <= set(item.types):
            continue
        case_id = f"{item.outcome.case_id}/multi"
        # A response fault and a retrieval fault, both decisive alone; retrieval runs first.
        faults = [fault_for(ErrorType.RESPONSE, item.outcome, case_id, 0),
                  replace(fault_for(ErrorType.RETRIEVAL, item.outcome, case_id, 0), message_scope=True)]
        result = inject(job.cls, job.conversation, job.components, job.snapshots, job.final, item.qa,
                        faults[0], seed=1, service=job.service, extra=faults[1:])
        assert not result.outcome.passed
        assert result.fired[0][0].error_type is ErrorType.RETRIEVAL
        assert result.fault_span == result.fired[0][1]
        checked += 1
    assert checked
    labels = [r for r in _rows(quick / "labels.jsonl") if r["part"] == "multi"]
    for label in labels:
        fired = list(label["faults"])
        assert fired[0]["role"] == "gold" and fired[0]["operation"] == label["operation"]
        assert len(fired) >= 2


def test_a_mem0_update_chained_after_an_extraction_fault_hits_what_is_left_of_the_message(
        locomo: str, tmp_path: Path) -> None:
    from dataclasses import replace

    from memtrace_bench.build import _Job
    from memtrace_bench.compound import fault_for
    from memtrace_bench.faults import inject
    from memtrace_otel.semconv import ErrorType

    job = _Job(quick_config(str(tmp_path)), "mem0-style", "26")
    job.run()
    checked = 0
    for item in job.decisive.values():
        if not {ErrorType.EXTRACTION, ErrorType.UPDATE} <= set(item.types):
            continue
        case_id = f"{item.outcome.case_id}/chain"
        extraction = fault_for(ErrorType.EXTRACTION, item.outcome, case_id, 0)
        update = fault_for(ErrorType.UPDATE, item.outcome, case_id, 0)
        args = (job.cls, job.conversation, job.components, job.snapshots, job.final, item.qa)
        alone = inject(*args, extraction, seed=1, service=job.service, extra=[update])
        # Without message scope the update aims at the critical sentence, which the extraction took.
        assert [f.error_type for f, _ in alone.fired] == [ErrorType.EXTRACTION]
        chained = inject(*args, extraction, seed=1, service=job.service,
                         extra=[replace(update, message_scope=True)])
        fired = [(f.error_type, span["name"]) for f, span in chained.fired]
        if len(fired) < 2:
            continue  # the extraction left nothing of the message to update
        assert fired == [(ErrorType.EXTRACTION, "mem0.extract"), (ErrorType.UPDATE, "mem0.update")]
        assert not chained.outcome.passed and chained.fault_span == chained.fired[0][1]
        checked += 1
    assert checked
