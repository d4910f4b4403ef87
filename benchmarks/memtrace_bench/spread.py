"""Spreading benchmark cases over LoCoMo question categories.

The offline reader answers some categories far more often than others (temporal questions most),
so cases taken in any order would crowd into one or two categories. Candidates are taken
round-robin over categories (:func:`round_robin`), and a :class:`CategoryQuota` refuses a case
whose category already holds more than its share of the cases kept so far (or of the cases a
job plans to keep). A job's quota still lets its first cases through, so over a whole build a part
can end a little above the share; :func:`balance` then drops the fewest cases that bring every
category of the part down to it.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["MAX_CATEGORY_SHARE", "CategoryQuota", "balance", "round_robin"]

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
    """Admits a case while its category holds at most ``share`` of the cases kept so far and, when
    the quota knows how many cases are ``planned``, fewer than ``share`` of those.

    The running share alone lets a job's first few cases through whatever their category (the
    first case is always 100% of one); the planned cap is what bites when a job keeps only a
    handful of cases. Not thread-safe: one quota per build job.

    >>> quota = CategoryQuota()
    >>> [c for c in [4, 4, 2, 4, 1, 4, 4, 2] if quota.allows(c) and quota.add(c) is None]
    [4, 2, 1, 4, 2]
    >>> quota = CategoryQuota(planned=5)  # at most two of five cases in one category
    >>> [c for c in [4, 2, 4, 1, 4, 2, 4, 4] if quota.allows(c) and quota.add(c) is None]
    [4, 2, 1, 4, 2]
    """

    def __init__(self, share: float = MAX_CATEGORY_SHARE, planned: int | None = None) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError("share must be in (0, 1]")
        self.share = share
        # At least one case a category, or a small plan could admit nothing at all.
        self.cap = None if planned is None else max(1, math.floor(share * planned + 1e-9))
        self.counts: Counter[int] = Counter()

    def allows(self, category: int) -> bool:
        count = self.counts[category]
        if self.cap is not None and count >= self.cap:
            return False
        return count <= self.share * sum(self.counts.values())

    def add(self, category: int) -> None:
        self.counts[category] += 1


def balance(rows: list[_Row], seed: int, share: float = MAX_CATEGORY_SHARE,
            category: Callable[[_Row], int] = _category) -> tuple[list[_Row], list[_Row]]:
    """``rows`` split into the most that hold no category above ``share`` (order kept) and the rest.

    Each category keeps at most ``share`` of the kept total: the largest such total is the fixed
    point of capping every category at ``share`` of the current total (it only shrinks, and never
    below a feasible total). Which rows of a capped category go is drawn with ``seed``. Fewer than
    ``1 / share`` categories can never hold the share (only an empty part would): then every row
    is kept, since a small build (``--quick``) would otherwise lose a whole part; the manifest's
    ``category_spread`` shows such a part as it is.

    >>> kept, dropped = balance([{"category": c} for c in [4, 4, 4, 4, 2, 2, 1]], 0)
    >>> sorted(r["category"] for r in kept), len(dropped)
    ([1, 2, 2, 4, 4], 2)
    >>> len(balance([{"category": 4}, {"category": 2}], 0)[0])  # two categories: kept as they are
    2
    """
    counts = Counter(category(r) for r in rows)
    if len(counts) * share < 1:
        return list(rows), []
    keep = dict(counts)
    while True:
        total = sum(keep.values())
        capped = {c: min(n, math.floor(share * total + 1e-9)) for c, n in keep.items()}
        if capped == keep:
            break
        keep = capped
    surplus = {c: counts[c] - keep[c] for c in counts if counts[c] > keep[c]}
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    drop: set[int] = set()
    for index in order:
        c = category(rows[index])
        if surplus.get(c, 0) > 0:
            surplus[c] -= 1
            drop.add(index)
    return ([r for i, r in enumerate(rows) if i not in drop],
            [r for i, r in enumerate(rows) if i in drop])
