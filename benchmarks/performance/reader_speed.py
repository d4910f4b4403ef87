"""Time the offline reader on a 4,000-word context (the benchmark build calls it thousands of times).

    python benchmarks/performance/reader_speed.py          # median ms per answer() call
"""

from __future__ import annotations

import statistics
import time

from memtrace_bench.locomo import load_conversation
from memtrace_bench.systems.interfaces import ContextItem, Sentence
from memtrace_bench.systems.reader import ExtractiveAnswerer
from memtrace_otel.text import sentences, words


def main() -> None:
    conversation = load_conversation("26")
    context, total = [], 0
    for turn in (t for s in conversation.sessions for t in s.turns):
        if total >= 4000:
            break
        context.append(ContextItem(f"u:{turn.dia_id}", [Sentence(turn.dia_id, turn.speaker, turn.date, x)
                                                          for x in sentences(turn.text)]))
        total += len(words(turn.text))
    reader, times = ExtractiveAnswerer(), []
    for qa in conversation.questions[:200]:
        start = time.perf_counter()
        reader.answer(qa.question, context)
        times.append(time.perf_counter() - start)
    print(f"{total} words, {len(times)} questions: median {1000 * statistics.median(times):.2f} ms, "
          f"max {1000 * max(times):.2f} ms per answer()")


if __name__ == "__main__":
    main()
