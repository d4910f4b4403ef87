"""Clean accuracy of the offline reader on rag's clean runs, by development / held-out conversation.

    MEMTRACE_LOCOMO_DIR=../shared/data/locomo python benchmarks/performance/reader_accuracy.py [--system rag]

Runs each conversation's clean run once (as ``memtrace bench build`` does), remembering the context
each question was given, then re-reads every context with the reader and the judge. The reader was
developed on conversations 26, 30, 41 and 42 and checked on 43, 47, 48 and 49 (docs/benchmark.md
says which later rules were made looking at all eight); a change to it should help both halves.
Categories 1, 2 and 4 only (issue 13's target).

Two scores: the build's judge (token F1 >= 0.4 on the whole answer), and, as ``locomo``, LoCoMo's
own scoring, which differs for category 1 only: the answer and the gold split at commas, each gold
item's best F1 averaged (snap-research/locomo ``task_eval/evaluation.py``, ``f1``).
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections import Counter
from typing import Any

from memtrace_bench.build import BuildConfig, _Job
from memtrace_bench.systems import SYSTEMS
from memtrace_bench.systems.interfaces import AnswerResult, ContextItem
from memtrace_bench.systems.offline import DEFAULT_F1_THRESHOLD, porter_stem
from memtrace_otel.text import token_f1

DEV = ("26", "30", "41", "42")
HELD_OUT = ("43", "47", "48", "49")


def _itemwise_f1(prediction: str, gold: str) -> float:
    """LoCoMo's category-1 score: each comma-separated gold item's best F1 over the answer's items,
    averaged."""
    answers = [p.strip() for p in prediction.split(",")]
    items = [g.strip() for g in gold.split(",")]
    return math.fsum(max(token_f1(a, g, porter_stem) for a in answers) for g in items) / len(items)


class _Remembering:
    """The job's answerer, remembering each question's context."""

    def __init__(self, answerer: Any) -> None:
        self.answerer = answerer
        self.asked: list[tuple[str, list[ContextItem]]] = []

    def answer(self, question: str, items: list[ContextItem]) -> AnswerResult:
        self.asked.append((question, items))
        return self.answerer.answer(question, items)

    def candidates(self, question: str, items: list[ContextItem]) -> list[AnswerResult]:
        return self.answerer.candidates(question, items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="rag", choices=sorted(SYSTEMS))
    args = parser.parse_args()
    tally: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as out:
        for conversation in DEV + HELD_OUT:
            job = _Job(BuildConfig(out=out), args.system, conversation)
            remembering = _Remembering(job.components.answerer)
            job.components.answerer = remembering
            outcomes = job.clean_run()
            split = "dev" if conversation in DEV else "held-out"
            for outcome, (question, items) in zip(outcomes, remembering.asked, strict=True):
                if outcome.category == 3:
                    continue
                text = remembering.answerer.answer(question, items).text
                passed = job.components.judge.judge(question, text, outcome.gold).passed
                locomo = (_itemwise_f1(text, outcome.gold) >= DEFAULT_F1_THRESHOLD if outcome.category == 1
                          else passed)
                for key in (split, f"{split} category {outcome.category}", "all"):
                    tally[f"{key} passed"] += passed
                    tally[f"{key} locomo"] += locomo
                    tally[f"{key} total"] += 1
    print(f"{args.system}: {'':16} judge          locomo")
    for key in sorted({k.rsplit(" ", 1)[0] for k in tally}):
        passed, locomo, total = tally[f"{key} passed"], tally[f"{key} locomo"], tally[f"{key} total"]
        print(f"{key:22} {passed:4}/{total:<4} {100 * passed / total:5.1f}%  "
              f"{locomo:4} {100 * locomo / total:5.1f}%")


if __name__ == "__main__":
    main()
