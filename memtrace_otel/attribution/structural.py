"""Content-free root-cause candidates: what spans without content still say.

With content capture off a span carries, per variable, its kind, size, hash
and version, whether it is a tombstone, and which operation read or wrote it.
That cannot say *whether* a memory unit holds a fact, but it narrows down
*where* it could have been lost, and this module ranks those places:

* **the units the evidence became**: stored variables reached from the
  evidence message through write-side operations before the question;
* **tombstones**: such a unit deleted before the question (the operation that
  wrote the tombstone lost it);
* **size drops**: an update that made such a unit smaller, or an extraction
  whose output is small for its input, judged against the operations of the
  same name elsewhere in the graph (its peers), since sizes vary by system;
* **what the retrieval returned**: a unit alive at question time that no
  read-side operation on the answer's slice read points at the retrieval; one
  that reached the answer's context points at the generation (or, since a
  unit's text is unseen, at whatever wrote it without the fact).

Every place gets a score from the rules that point at it; scores become
confidences by their share of the total, so that a case whose rules point at
several places says so (``ambiguous``) instead of naming one with confidence.

>>> _share_below(0.5, [0.2, 0.9, 1.0, 1.1])
0.75
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass

from memtrace_otel.attribution.carrying import LineageCase
from memtrace_otel.attribution.graph_index import GraphIndex
from memtrace_otel.graph.index import lookup, variables_by_name
from memtrace_otel.graph.node_types import OPERATION
from memtrace_otel.semconv import Category, ErrorType, error_type_of_category

__all__ = ["Suspect", "structural_suspects"]

_WRITE_SIDE = frozenset({Category.INGEST, Category.EXTRACTION, Category.UPDATE, Category.DELETION,
                         Category.OTHER})
_READ_SIDE = frozenset({Category.RETRIEVAL, Category.RERANK})
_EXTRACTING = frozenset({Category.EXTRACTION, Category.INGEST})
_PEERS_KEY = "memtrace_otel.attribution.structural.ratios"
# Rule weights: a tombstone is seen, a size drop is measured against peers, a miss or a hit by the
# retrieval is seen but says nothing about whether the unit held the fact.
_TOMBSTONE = 3.0
_SHRINK = 2.5
_SMALL_EXTRACTION = 2.0
_MISSED = 1.6
_REACHED = 1.4
_WROTE_UNIT = 0.5
_RERANK_HIT = 0.6
_MIN_PEERS = 4
_DROP_FLOOR = 0.05


@dataclass(slots=True)
class Suspect:
    """One place where the information may have been lost, with its score and why."""

    operation: str
    error_type: ErrorType
    score: float
    reason: str


@dataclass(slots=True)
class _Reach:
    """What the evidence became before the question: write-side ops (in order) and unit names."""

    ops: list[str]
    units: dict[str, str]  # name -> first version reached
    depth: dict[str, int]  # op -> write-side steps from the evidence


def _reach(case: LineageCase, evidence: str) -> _Reach:
    index = case.index
    ops: dict[str, int] = {}
    units: dict[str, str] = {}
    queue, seen = deque([(evidence, 0)]), {evidence}
    while queue:
        variable, depth = queue.popleft()
        for op in index.readers(variable):
            if op in ops or index.order(op) >= case.query_time or index.category(op) not in _WRITE_SIDE:
                continue
            ops[op] = depth + 1
            for out in index.outputs(op):
                if out in seen:
                    continue
                seen.add(out)
                if index.is_stored(out):
                    units.setdefault(index.data(out)["name"], out)
                queue.append((out, depth + 1))
    ordered = sorted(ops, key=index.order)
    return _Reach(ordered, units, ops)


def _size(index: GraphIndex, variable: str) -> int:
    return int(index.data(variable).get("size") or 0)


def _sizes(index: GraphIndex, op: str) -> tuple[int, int]:
    """Input and (non-tombstone) output sizes of an operation."""
    inputs = sum(_size(index, v) for v in index.inputs(op))
    outputs = sum(_size(index, v) for v in index.outputs(op) if not index.data(v).get("deleted"))
    return inputs, outputs


@dataclass(slots=True)
class _Peers:
    """How the operations of one name change sizes: a line out = a * in + b, its spread, and how
    often one of their updates made a unit smaller."""

    slope: float
    intercept: float
    spread: float
    shrink_share: float
    count: int


@dataclass(slots=True)
class _Sizes:
    """Per-graph size facts, gathered in one pass over the edges: every operation's input and output
    sizes, the operations of each name, each version's predecessor, and the peer fits made so far."""

    sizes: dict[str, tuple[int, int]]
    by_name: dict[str, list[str]]
    previous: dict[str, str]
    fits: dict[str, _Peers]


def _size_table(index: GraphIndex) -> _Sizes:
    return lookup(index.G, _PEERS_KEY, lambda G: _gather_sizes(index))


def _gather_sizes(index: GraphIndex) -> _Sizes:
    G = index.G
    size_in: dict[str, int] = defaultdict(int)
    size_out: dict[str, int] = defaultdict(int)
    for source, target, role in G.edges(data="role"):
        if role == "input":
            size_in[target] += _size(index, source)
        elif role == "output" and not G.nodes[target].get("deleted"):
            size_out[source] += _size(index, target)
    by_name: dict[str, list[str]] = defaultdict(list)
    for node, d in G.nodes(data=True):
        if d.get("type") == OPERATION:
            by_name[str(d.get("name"))].append(node)
    previous = {v: vs[i - 1][1] for vs in variables_by_name(G).values() for i, (_, v) in enumerate(vs) if i}
    sizes = {op: (size_in.get(op, 0), size_out.get(op, 0)) for ops in by_name.values() for op in ops}
    return _Sizes(sizes, by_name, previous, {})


def _peers(index: GraphIndex, name: str) -> _Peers:
    """Size behaviour of every operation called ``name`` in the graph (cached per graph)."""
    table = _size_table(index)
    found = table.fits.get(name)
    if found is None:
        found = table.fits[name] = _fit(index, table, table.by_name.get(name, []))
    return found


def _fit(index: GraphIndex, table: _Sizes, ops: list[str]) -> _Peers:
    points = [p for p in (table.sizes[op] for op in ops) if p[0] > 0]
    transitions = [_size(index, table.previous[after]) > _size(index, after)
                   for op in ops for after in index.outputs(op) if after in table.previous]
    shrink = sum(transitions) / len(transitions) if transitions else 0.0
    if len(points) < _MIN_PEERS:
        return _Peers(1.0, 0.0, 0.0, shrink, len(points))
    mean_x = math.fsum(x for x, _ in points) / len(points)
    mean_y = math.fsum(y for _, y in points) / len(points)
    var_x = math.fsum((x - mean_x) ** 2 for x, _ in points)
    slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in points) / var_x if var_x else 0.0
    intercept = mean_y - slope * mean_x
    residuals = sorted(abs(y - slope * x - intercept) for x, y in points)
    return _Peers(slope, intercept, residuals[len(residuals) // 2], shrink, len(points))


def _share_below(value: float, peers: list[float]) -> float:
    """Share of ``peers`` strictly above ``value``: 1.0 when ``value`` is the smallest."""
    return sum(p > value for p in peers) / len(peers) if peers else 0.0


def _drop_anomaly(index: GraphIndex, op: str) -> float:
    """How much smaller ``op``'s output is than its peers' size behaviour predicts (0..1).

    Measured in units of the peers' typical deviation (median absolute residual),
    floored at 5% of the expected size, so that a system whose outputs vary a lot
    needs a larger drop.
    """
    peers = _peers(index, str(index.data(op).get("name")))
    size_in, size_out = _size_table(index).sizes.get(op) or _sizes(index, op)
    if peers.count < _MIN_PEERS or size_in <= 0:
        return 0.0
    expected = peers.slope * size_in + peers.intercept
    scale = max(peers.spread, _DROP_FLOOR * abs(expected), 1.0)
    deviations = (expected - size_out) / scale
    return min(max((deviations - 1.0) / 3.0, 0.0), 1.0)


def _write_suspects(case: LineageCase, reach: _Reach) -> list[Suspect]:
    """Tombstones, shrinking updates and small extractions among the evidence's units.

    Sizes stand in for content: with content captured the walk reads what a unit
    holds, so the size rules (and fitting every operation's peers, their cost)
    are skipped.
    """
    index, found, sizes = case.index, [], case.structural
    for name, first in reach.units.items():
        versions = index.versions(name)
        for before, after in zip(versions[versions.index(first):], versions[versions.index(first) + 1:],
                                 strict=False):
            op = index.producer(after)
            if op is None or index.order(op) >= case.query_time:
                break
            if index.data(after).get("deleted"):
                kind = ErrorType.DELETION if index.category(op) == Category.DELETION else (
                    error_type_of_category(index.category(op)) or ErrorType.DELETION)
                found.append(Suspect(op, kind, _TOMBSTONE, f"it deleted {before}, which the evidence became"))
                break
            if sizes and _size(index, after) < _size(index, before):
                # How rare it is for this operation's updates to shrink a unit: rare is suspicious.
                anomaly = 1.0 - _peers(index, str(index.data(op).get("name"))).shrink_share
                kind = error_type_of_category(index.category(op)) or ErrorType.UPDATE
                shrink = f"{_size(index, before)} -> {_size(index, after)} bytes"
                found.append(Suspect(op, kind, _SHRINK * anomaly, f"it shrank {before} ({shrink})"))
    for op in reach.ops:
        if index.category(op) not in _EXTRACTING:
            continue
        anomaly = _drop_anomaly(index, op) if sizes else 0.0
        if not index.outputs(op):
            found.append(Suspect(op, ErrorType.EXTRACTION, _SMALL_EXTRACTION,
                                 "it read the evidence and wrote nothing"))
        elif anomaly > 0:
            found.append(Suspect(op, ErrorType.EXTRACTION, _SMALL_EXTRACTION * anomaly,
                                 "its output is small for its input, compared with its peers"))
    return found


def _read_chain(case: LineageCase) -> list[str]:
    index = case.index
    return [op for op in case.read_side() if index.category(op) in _READ_SIDE]


def _read_suspects(case: LineageCase, reach: _Reach) -> list[Suspect]:
    """The retrieval that missed an alive unit, or the generation whose context held one."""
    index = case.index
    found: list[Suspect] = []
    chain = _read_chain(case)
    retrievals = [op for op in chain if index.category(op) == Category.RETRIEVAL]
    read = {v for op in chain for v in index.inputs(op)}
    alive = {}
    for name in reach.units:
        current = index.state_at(name, case.query_time)
        if current is not None and not index.data(current).get("deleted"):
            alive[name] = current
    if not alive:
        return found
    hit = [v for v in alive.values() if v in read]
    missed = [v for v in alive.values() if v not in read]
    share = len(hit) / len(alive)
    if missed and retrievals:
        found.append(Suspect(retrievals[0], ErrorType.RETRIEVAL, _MISSED * (1 - share),
                             f"{missed[0]} was in memory but the retrieval did not return it"))
    if hit:
        found.append(Suspect(case.generator, ErrorType.RESPONSE, _REACHED * share,
                             f"{hit[0]} reached the answer's context"))
        for op in chain:
            if index.category(op) == Category.RERANK and not set(index.inputs(op)) & set(hit):
                # A rerank that reads a candidate list, not the units: whether it kept one is unseen.
                found.append(Suspect(op, ErrorType.RETRIEVAL, _RERANK_HIT * share,
                                     "it chose from candidates that held the evidence's unit"))
    for variable in alive.values():
        writer = index.producer(variable)
        if writer is not None and writer in reach.depth and index.category(writer) in _EXTRACTING:
            found.append(Suspect(writer, ErrorType.EXTRACTION, _WROTE_UNIT,
                                 f"it wrote {variable}, whose text is unseen"))
    return found


def structural_suspects(case: LineageCase, evidence: list[str]) -> list[Suspect]:
    """Ranked content-free suspects for ``case`` given its ``evidence`` messages, best first.

    Scores of one operation from several evidence messages or rules add up.
    """
    scores: dict[str, Suspect] = {}
    for message in evidence:
        reach = _reach(case, message)
        for suspect in (*_write_suspects(case, reach), *_read_suspects(case, reach)):
            known = scores.get(suspect.operation)
            if known is None:
                scores[suspect.operation] = suspect
            else:
                known.score += suspect.score
                if suspect.score > known.score - suspect.score:
                    known.reason, known.error_type = suspect.reason, suspect.error_type
    index = case.index
    return sorted(scores.values(), key=lambda s: (-round(s.score, 6), index.order(s.operation), s.operation))
