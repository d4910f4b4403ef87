"""Fault injection, the benchmark build, and the scorer (quick-sized data, seconds)."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from memtrace_bench.build import BuildConfig, _Job, build, quick_config
from memtrace_bench.faults import inject
from memtrace_bench.score import GraphCache, find_case_evaluation, score_cases, summarize
from memtrace_bench.spread import MAX_CATEGORY_SHARE, CategoryQuota, balance, round_robin
from memtrace_bench.systems import SYSTEMS
from memtrace_bench.systems.base import Fault
from memtrace_otel.attribution.base import ErrorType, create_engine
from memtrace_otel.cli import main

CATEGORY_OF = {
    "ExtractionError": {"extraction"}, "UpdateError": {"update"}, "DeletionError": {"deletion"},
    "RetrievalError": {"retrieval", "rerank"}, "ResponseError": {"generation"},
}


@pytest.fixture(scope="module")
def quick_bench(tmp_path_factory: pytest.TempPathFactory, locomo: str) -> Path:
    out = tmp_path_factory.mktemp("bench")
    build(quick_config(str(out)))
    return out


def _labels(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "labels.jsonl").read_text().splitlines()]


def test_quick_build_covers_every_applicable_cell(quick_bench: Path) -> None:
    manifest = json.loads((quick_bench / "manifest.json").read_text())
    for system, applicable in manifest["applicable"].items():
        for error_type in applicable:
            assert manifest["cases"][system].get(error_type, 0) >= 1, (system, error_type)
        for error_type in manifest["not_applicable"][system]:
            assert error_type not in manifest["cases"][system]
    assert manifest["labelled_cases"] == len(_labels(quick_bench))
    assert (quick_bench / "natural_failures.jsonl").read_text().strip()


def test_cases_spread_over_question_categories(quick_bench: Path) -> None:
    """No category crowds the others out: the manifest's spread matches the labels, and no category
    holds more than 40% of the labelled cases (the quota admits one case over, at most, per job)."""
    manifest = json.loads((quick_bench / "manifest.json").read_text())
    labels = _labels(quick_bench)
    counts = Counter(str(label["category"]) for label in labels)
    spread = manifest["category_spread"]["all"]
    assert {c: v["cases"] for c, v in spread.items()} == dict(counts)
    assert len(counts) >= 3 and max(counts.values()) / len(labels) <= MAX_CATEGORY_SHARE


def test_no_built_part_holds_a_category_above_its_share(quick_bench: Path) -> None:
    """The build-wide balance holds each injected and compound part to the share; what it dropped
    is counted in the manifest and its span files are gone with it (only natural labels are exempt)."""
    manifest = json.loads((quick_bench / "manifest.json").read_text())
    by_part: dict[str, Counter[int]] = {}
    for label in _labels(quick_bench):
        by_part.setdefault(label["part"], Counter())[label["category"]] += 1
    for part in ("injected", "multi", "distractor"):
        counts = by_part.get(part, Counter())
        if len(counts) * MAX_CATEGORY_SHARE < 1:
            continue  # too few categories for the share to hold: kept whole (a small build's part)
        assert max(counts.values()) <= MAX_CATEGORY_SHARE * sum(counts.values()), (part, counts)
    assert set(manifest["spread_dropped"]) <= {"injected", "multi", "distractor"}
    assert manifest["probes"].keys() <= set(manifest["applicable"])


@pytest.mark.parametrize("seed", range(40))
def test_balance_keeps_the_most_cases_that_hold_the_share(seed: int) -> None:
    import random

    rng = random.Random(seed)
    rows = [{"category": rng.choice([1, 2, 2, 4, 4, 4, 4])} for _ in range(rng.randint(0, 60))]
    kept, dropped = balance(rows, seed)
    assert len(kept) + len(dropped) == len(rows)
    counts = Counter(r["category"] for r in kept)
    if len({r["category"] for r in rows}) * MAX_CATEGORY_SHARE < 1:
        assert not dropped  # the share cannot hold: the part is kept whole
        return
    assert max(counts.values()) <= MAX_CATEGORY_SHARE * len(kept) + 1e-9
    # Maximal: adding back any dropped row breaks the share.
    for row in dropped:
        more = counts + Counter([row["category"]])
        assert max(more.values()) > MAX_CATEGORY_SHARE * (len(kept) + 1) + 1e-9


def test_category_quota_keeps_each_category_to_its_share() -> None:
    quota = CategoryQuota(0.4)
    stream = [4] * 60 + [2] * 30 + [1] * 30  # most candidates are category 4, and they come first
    kept = [c for c in stream if quota.allows(c) and quota.add(c) is None]
    assert Counter(kept)[4] / len(kept) <= 0.4 + 1 / len(kept)
    assert round_robin([{"category": c} for c in stream], 3, 0) != [{"category": 4}] * 3
    with pytest.raises(ValueError):
        CategoryQuota(0.0)


def test_each_label_names_the_perturbed_span_of_a_failed_case(quick_bench: Path) -> None:
    cache = GraphCache(str(quick_bench))
    for label in _labels(quick_bench):
        G, problems = cache.get(label["spans"])
        assert not problems, problems
        evaluation = find_case_evaluation(G, label["case_id"])
        assert evaluation is not None, label["case_id"]
        assert G.nodes[evaluation]["prediction"] == label["prediction"]
        op = f"op:{label['operation']['trace_id']}:{label['operation']['span_id']}"
        assert op in G, label["case_id"]
        assert G.nodes[op]["category"] in CATEGORY_OF[label["error_type"]], label["case_id"]
        assert G.nodes[op]["order"] < G.nodes[evaluation]["order"]


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_injector_breaks_the_answer_and_removing_it_restores_it(locomo: str, tmp_path: Path,
                                                                system: str) -> None:
    config = BuildConfig(out=str(tmp_path), conversations=["26"], max_sessions=8, jobs=1)
    job = _Job(config, system, "26")
    outcomes = job.clean_run()
    usable = [o for o in outcomes if o.passed and o.source and o.source.dia_id in o.evidence]
    questions = {job.case_id(q): q for q in job.conversation.questions}
    for error_type in SYSTEMS[system].applicable:
        broken = None
        for outcome in usable[:6]:
            qa = questions[outcome.case_id]
            fault = Fault(error_type, outcome.unit or "", outcome.source, f"{outcome.case_id}/x")
            args = (SYSTEMS[system], job.conversation, job.components, job.snapshots, job.final, qa, fault)
            faulty = inject(*args, seed=1, service="t")
            if faulty.kept:
                broken = faulty
                break
        assert broken is not None, f"{system}: no {error_type.value} fault broke an answer"
        categories = {r.span_id: r.attributes.get("memtrace.operation.category") for r in broken.records}
        assert categories[broken.fault_span["span_id"]] in CATEGORY_OF[error_type.value]
        control = inject(*args, seed=1, service="t", apply=False)
        assert control.outcome.passed and control.fault_span is None
        assert control.outcome.prediction == outcome.prediction


def test_build_is_reproducible_and_seed_sensitive(locomo: str, tmp_path: Path) -> None:
    def labels(out: str, seed: int) -> str:
        config = quick_config(out, seed)
        config.systems = ["rag"]
        build(config)
        return (Path(out) / "labels.jsonl").read_text().replace(out, "")

    first = labels(str(tmp_path / "a"), 5)
    assert first == labels(str(tmp_path / "b"), 5)
    assert first != labels(str(tmp_path / "c"), 6)


def _hand_made_bench(directory: Path) -> None:
    """Two cases over one graph: the gold of one is its extraction, of the other its generation."""
    from memtrace_bench.spanfiles import write_span_file
    from memtrace_bench.systems.base import TracedRun
    from memtrace_otel.semconv import Category, VariableKind

    run = TracedRun(11, "hand")
    mt = run.tracer
    gold_ops = {}
    for case in ("A", "B"):
        with mt.operation("extract", Category.EXTRACTION) as op:
            msg = op.read(f"msg:D{case}:1", content="Ann adopted Rex.", kind=VariableKind.MESSAGE)
            unit = op.write(f"mem:{case}", "Ann adopted a cat.", kind=VariableKind.MEMORY_UNIT)
            extract = op.span_context
        with mt.operation("retrieve", Category.RETRIEVAL) as op:
            op.read(unit)
            ctx = op.write(f"ctx:{case}", "Ann adopted a cat.", kind=VariableKind.CONTEXT)
        with mt.operation("generate", Category.GENERATION) as op:
            op.read(ctx)
            answer = op.write(f"answer:{case}", "a cat", kind=VariableKind.ANSWER)
            generate = op.span_context
        with mt.operation("judge", Category.EVALUATION) as op:
            op.read(answer)
            op.record_evaluation(False, score=0.0, question="Pet?", prediction="a cat", gold="Rex",
                                 evidence=[f"D{case}:1"], answer=answer, case_id=case)
        assert msg.name.startswith("msg:")
        gold_ops[case] = extract if case == "A" else generate
    write_span_file(str(directory / "spans.jsonl.gz"), run.sink.drain())
    with open(directory / "labels.jsonl", "w") as handle:
        for case, error_type in (("A", "ExtractionError"), ("B", "ResponseError")):
            context = gold_ops[case]
            handle.write(json.dumps({
                "case_id": case, "system": "hand", "error_type": error_type, "spans": ["spans.jsonl.gz"],
                "operation": {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
                              "name": "x"}}) + "\n")


def test_scorer_numbers_on_a_hand_made_case_set(tmp_path: Path) -> None:
    _hand_made_bench(tmp_path)
    results, problems = score_cases(str(tmp_path), "last-operation")
    assert not problems
    assert [(r.case_id, r.type_correct, r.operation_correct) for r in results] == [
        ("A", False, False), ("B", True, True)]
    summary = summarize(results, "last-operation")
    assert summary["overall"]["type_accuracy"] == 0.5
    assert summary["overall"]["operation_accuracy"] == 0.5
    assert summary["by_error_type"]["ExtractionError"]["type_accuracy"] == 0.0
    assert summary["confusion"]["ExtractionError"] == {"ResponseError": 1}
    assert summary["confusion"]["ResponseError"] == {"ResponseError": 1}


def test_trivial_baselines_blame_operations_on_the_slice(quick_bench: Path) -> None:
    results, _ = score_cases(str(quick_bench), "random-slice", limit=10)
    again, _ = score_cases(str(quick_bench), "random-slice", limit=10)
    assert [r.predicted_span for r in results] == [r.predicted_span for r in again]
    assert all(r.predicted_span for r in results)
    last, _ = score_cases(str(quick_bench), "last-operation", limit=10)
    assert all(r.predicted_type == ErrorType.RESPONSE.value for r in last)
    assert create_engine("random-slice").name == "random-slice"


def test_cli_build_and_score_json(locomo: str, tmp_path: Path) -> None:
    runner = CliRunner()
    out = str(tmp_path / "b")
    built = runner.invoke(main, ["bench", "build", "--quick", "--system", "rag", "--out", out, "--json"])
    assert built.exit_code == 0, built.output
    assert json.loads(built.stdout)["labelled_cases"] > 0
    scored = runner.invoke(main, ["bench", "score", "--engine", "last-operation", out, "--json"])
    assert scored.exit_code == 0, scored.output
    summary = json.loads(scored.stdout)
    assert summary["overall"]["cases"] == len(_labels(Path(out)))
    missing = runner.invoke(main, ["bench", "score", "--engine", "last-operation", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "no labels file" in missing.output
    assert os.path.isdir(out)


def test_cli_score_prints_the_cell_table_per_system_and_error_type(tmp_path: Path) -> None:
    _hand_made_bench(tmp_path)
    scored = CliRunner().invoke(main, ["bench", "score", "--engine", "last-operation", str(tmp_path)])
    assert scored.exit_code == 0, scored.output
    assert "op/type accuracy %" in scored.stdout
    table = scored.stdout.split("gold type", 1)[1].split("confusion", 1)[0]
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:] if line.split()}
    # columns: the one system ("hand"), then all systems; cells: operation/type accuracy in %
    assert rows["Extraction"][:2] == ["0.0/0.0", "0.0/0.0"]
    assert rows["Response"][:2] == ["100.0/100.0", "100.0/100.0"]
    assert rows["Update"][:2] == ["-", "-"]
    assert rows["all"][:2] == ["50.0/50.0", "50.0/50.0"]
    summary = json.loads(CliRunner().invoke(
        main, ["bench", "score", "--engine", "last-operation", str(tmp_path), "--json"]).stdout)
    assert summary["cells"]["hand"]["ResponseError"]["operation_accuracy"] == 1.0
    assert set(summary["cells"]["hand"]) == {"ExtractionError", "ResponseError"}


def test_scores_are_grouped_and_filtered_by_benchmark_part(tmp_path: Path) -> None:
    _hand_made_bench(tmp_path)
    labels = _labels(tmp_path)
    labels[0]["part"] = "natural"  # case A; case B has no part: an injected case
    (tmp_path / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in labels))
    runner = CliRunner()
    both = json.loads(runner.invoke(main, ["bench", "score", "--engine", "last-operation", str(tmp_path),
                                           "--json"]).stdout)
    assert {p: r["cases"] for p, r in both["by_part"].items()} == {"injected": 1, "natural": 1}
    assert both["by_part"]["injected"]["operation_accuracy"] == 1.0
    assert both["by_part"]["natural"]["operation_accuracy"] == 0.0
    assert [c["part"] for c in both["cases"]] == ["natural", "injected"]
    natural = runner.invoke(main, ["bench", "score", "--engine", "last-operation", str(tmp_path),
                                   "--part", "natural", "--json"])
    assert natural.exit_code == 0, natural.output
    summary = json.loads(natural.stdout)
    assert [c["case_id"] for c in summary["cases"]] == ["A"] and summary["parts"] == ["natural"]
    table = runner.invoke(main, ["bench", "score", "--engine", "last-operation", str(tmp_path),
                                 "--part", "injected", "--part", "natural"]).stdout
    cells = [line.split("│")[1:3] for line in table.splitlines() if line.count("│") > 3]
    # a narrow terminal wraps "part natural" onto two lines of the first column
    names = [" ".join(f"{a[0]} {b[0]}".split()) if not b[1].strip() else " ".join(a[0].split())
             for a, b in zip(cells, [*cells[1:], ["", ""]], strict=True) if a[1].strip()]
    assert names[-2:] == ["part injected", "part natural"], names
    bad = runner.invoke(main, ["bench", "score", "--engine", "last-operation", str(tmp_path), "--part", "x"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


@pytest.mark.parametrize("bad", ["{outside}/26", "../26", "26/../../26", "", ".hidden"])
def test_build_rejects_conversation_ids_that_are_paths(locomo: str, tmp_path: Path, bad: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    # A conversation file the path points at: without the check the build reads it and writes
    # its spans under outside/26/, not under --out.
    (outside / "26.json").symlink_to(os.path.join(locomo, "26.json"))
    out = tmp_path / "b"
    result = CliRunner().invoke(main, ["bench", "build", "--quick", "--system", "rag", "--out", str(out),
                                       "--conversation", bad.format(outside=outside)])
    assert result.exit_code == 2, result.output
    assert "is not a plain conversation id" in result.output and "Traceback" not in result.output
    assert sorted(p.name for p in outside.iterdir()) == ["26.json"]
    assert not out.exists()
    with pytest.raises(ValueError, match="not a plain conversation id"):
        build(BuildConfig(out=str(out), conversations=[bad.format(outside=outside)], jobs=1))
    assert not out.exists()


def test_build_without_the_bench_extra_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)  # what a plain install looks like to find_spec
    result = CliRunner().invoke(main, ["bench", "build", "--quick", "--out", str(tmp_path / "b")])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: `memtrace bench build` needs wordllama: install the benchmark with its dependencies "
        "(pip install -e ./benchmarks)"]
    assert not (tmp_path / "b").exists()


def test_mem0_similarity_index_finds_what_a_scan_of_every_unit_finds(locomo: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from memtrace_bench.systems.mem0_style import Mem0StyleSystem
    from memtrace_otel.text import content_tokens

    def scan(system: Mem0StyleSystem, fact) -> list[tuple[str, float]]:
        """The definition: Jaccard over content tokens, same speaker, no shared token no result,
        older unit first among equals."""
        tokens = frozenset(content_tokens(f"{fact.speaker} {fact.text}"))
        scored = [(u.name, len(tokens & u.tokens) / len(tokens | u.tokens))
                  for u in system.state.units.values()
                  if u.sentences[0].speaker == fact.speaker and tokens & u.tokens]
        return sorted(scored, key=lambda item: -item[1])[:system.search_k]

    indexed = Mem0StyleSystem._similar_units
    compared = []

    def both(system: Mem0StyleSystem, fact):
        found = indexed(system, fact)
        compared.append(([(u.name, s) for u, s in found], scan(system, fact)))
        return found

    monkeypatch.setattr(Mem0StyleSystem, "_similar_units", both)
    job = _Job(quick_config(str(tmp_path)), "mem0-style", "26")
    job.clean_run()  # updates and deletes included: the index follows the store
    assert len(compared) > 100 and any(len(found) > 1 for found, _ in compared)
    assert all(found == expected for found, expected in compared)


def test_wordllama_rows_are_remembered_and_equal_to_the_model_s(locomo: str) -> None:
    from memtrace_bench.systems.offline import WordLlamaEmbedder, default_embedder

    embedder = default_embedder()
    if not isinstance(embedder, WordLlamaEmbedder):
        pytest.skip("wordllama is not installed (the lexical embedder has no memo)")
    fresh = WordLlamaEmbedder(embedder._model)
    first, again = fresh.embed(["Ann adopted a dog."]), fresh.embed(["Ann adopted a dog."])
    assert (first == again).all() and (first == fresh._rows(["Ann adopted a dog."])).all()
    assert len(fresh._cache) == 1 and not first.flags.writeable
    pair = fresh.embed(["Ann adopted a dog.", "Rex"])
    assert pair.shape[0] == 2 and len(fresh._cache) == 1  # batches are not memoised
