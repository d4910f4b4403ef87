"""Spreading benchmark cases over LoCoMo question categories.

The offline reader answers some categories far more often than others (temporal questions most),
so cases taken in any order would crowd into one or two categories. Candidates are taken
round-robin over categories (:func:`round_robin`), and a :class:`CategoryQuota` refuses a case
whose category already holds more than its share of the cases kept so far.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["MAX_CATEGORY_SHARE", "CategoryQuota", "round_robin"]

MAX_CATEGORY_SHARE = 0.4
"""No question category above this share of a part's cases (issue 13's target)."""

_Row = TypeVar("_Row")


def _category(row: Any) -> int:
    return int(row["category"])


def round_robin(rows: list[_Row], limit: int, seed: int,
                category: Callable[[_Row], int] = _category) -> list[_Row]:
    """At most ``limit`` of ``rows``, shuffled by ``seed``, taken round-robin over question categories.

    >>> rows = [{"category": c, "n": i} for i, c in enumerate([1, 1, 1, 2, 4])]
    >>> sorted(r["category"] for r in round_robin(rows, 3, 0))
    [1, 2, 4]
    """
    by_category: dict[int, list[_Row]] = defaultdict(list)
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    for row in shuffled:
        by_category[category(row)].append(row)
    queues = [by_category[c] for c in sorted(by_category)]
    picked: list[_Row] = []
    while len(picked) < limit and any(queues):
        for queue in queues:
            if queue and len(picked) < limit:
                picked.append(queue.pop(0))
    return picked


class CategoryQuota:
    """Admits a case while its category holds at most ``share`` of the cases kept so far.

    Over many cases no category ends far above ``share`` (one case over, at most, per quota).
    Not thread-safe: one quota per build job.

    >>> quota = CategoryQuota()
    >>> kept = [c for c in [4, 4, 2, 4, 1, 4, 4, 2] if quota.allows(c) and quota.add(c) is None]
    >>> kept
    [4, 2, 1, 4, 2]
    """

    def __init__(self, share: float = MAX_CATEGORY_SHARE) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError("share must be in (0, 1]")
        self.share = share
        self.counts: Counter[int] = Counter()

    def allows(self, category: int) -> bool:
        return self.counts[category] <= self.share * sum(self.counts.values())

    def add(self, category: int) -> None:
        self.counts[category] += 1
