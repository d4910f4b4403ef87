"""A writer of smartcomment execution graphs in the shape ``ExecNetwork.export_graph()`` gives.

smartcomment needs Python >= 3.12 and this project runs on 3.11, so the MemBase
generators write the exported JSON themselves, with smartcomment's own rules
(read from zjunlp/smartcomment at 6683bf8, ``api/public.py``, ``api/_helpers.py``,
``api/_mutation.py``, ``identity/registry.py``):

* a variable's full id is ``class_name:identity@version`` (or ``identity@version``
  without a class name); the default identity is the content's
  ``type:sha1(json.dumps(value, sort_keys=True, default=repr))``, so equal values
  are one node;
* writing an identity whose latest value is equal returns that node; a different
  value makes version ``v+1`` (smartcomment's non-strict behaviour; a
  ``comment_mutation`` makes it explicitly, with a version edge);
* an operation scope owns every edge made inside it: ``comment_link`` edges take
  the scope's category, ``comment_op(reuse_op=True)`` edges the category passed
  (``"operation"`` by default), mutation edges the mutation category;
* ``created_at`` is local time without a zone, to the millisecond.

Every id and stamp comes from a counter and a seed, so one seed writes one file,
byte for byte. :class:`NullGraph` has the same methods and records nothing: the
counterfactual runs of a build use it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

__all__ = ["Graph", "NullGraph", "Var", "content_identity", "json_encode"]

_EPOCH = datetime(2026, 6, 1, 9, 0, 0)


def json_encode(value: Any) -> str:
    """MemBase's ``partial(json.dumps, ensure_ascii=False, indent=4, sort_keys=True)``."""
    return json.dumps(value, ensure_ascii=False, indent=4, sort_keys=True)


def content_identity(value: Any) -> str:
    """smartcomment's default identity: ``type:sha1`` of the canonical JSON of the value.

    >>> content_identity("DELETED")
    'str:666da25f0264c6010f91588c6a017d8584ba8b20'
    """
    if isinstance(value, str):
        return _str_identity(value)
    try:
        canonical = json.dumps(value, sort_keys=True, default=repr)
    except TypeError:
        canonical = repr(value)
    return f"{type(value).__qualname__}:{hashlib.sha1(canonical.encode('utf-8')).hexdigest()}"


@lru_cache(maxsize=1 << 16)
def _str_identity(value: str) -> str:
    """A string's identity, remembered: a build's runs of one conversation write the same strings again."""
    return f"str:{hashlib.sha1(json.dumps(value).encode('utf-8')).hexdigest()}"


@dataclass(frozen=True, slots=True)
class Var:
    """A handle on one variable version (smartcomment's ``RuntimeVariable``)."""

    full_node_id: str
    full_name: str
    version: int
    value: str


@dataclass(slots=True)
class _Op:
    op_id: str
    category: str


@dataclass
class Graph:
    """One execution graph being written; not thread-safe."""

    seed: str
    project_id: str
    user_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    operations: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)
    _latest: dict[str, Var] = field(default_factory=dict)
    _by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    _counter: int = 0
    _clock_ms: int = 0
    _session: str = "__none__"
    _scope: _Op | None = None
    _filename: str = ""
    graph_id: str = ""
    last_op: str = ""
    recording: bool = True  # False: a counterfactual run, whose callers may skip building values

    def __post_init__(self) -> None:
        self.graph_id = f"graph-{self._hex('graph')}"

    def _hex(self, *parts: str) -> str:
        return hashlib.blake2b("\x1f".join((self.seed, *parts)).encode(), digest_size=16).hexdigest()

    def _next_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}-{self._hex(prefix, str(self._counter))}"

    def uuid(self) -> str:
        """A deterministic stand-in for ``uuid.uuid4()`` (mem0's and NaiveRAG's memory ids)."""
        self._counter += 1
        h = self._hex("uuid", str(self._counter))
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"

    def now(self) -> str:
        self._clock_ms += 1
        stamp = _EPOCH + timedelta(milliseconds=self._clock_ms)
        return stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    def advance(self, seconds: float) -> None:
        """Let time pass (between MemBase's stages, between messages)."""
        self._clock_ms += int(seconds * 1000)

    def _common(self, filename: str | None = None) -> dict[str, Any]:
        where = filename or self._filename
        return {"created_at": self.now(), "filename": where, "lineno": 0, "graph_id": self.graph_id,
                "user_id": self.user_id, "project_id": self.project_id}

    # sessions -------------------------------------------------------------------------------

    def session(self, category: str, comment: str, session_id: str | None = None,
                metadata: dict[str, Any] | None = None) -> str:
        """``comment_session``: later records belong to it; returns its id."""
        ident = session_id or self._next_id("session")
        self.sessions.append({**self._common(), "session_id": ident, "session_name": ident,
                              "comment": comment, "category": category, "metadata": metadata or {},
                              "trigger_point": f"{self._filename}:0"})
        self._session = ident
        return ident

    def where(self, filename: str) -> None:
        """The MemBase source file the next records are made in (``filename`` / ``trigger_point``)."""
        self._filename = filename

    # variables ------------------------------------------------------------------------------

    def variable(self, value: str, *, identity: str, category: str, class_name: str | None = None,
                 comment: str | None = None, force_new_version: bool = False) -> Var:
        """``comment_variable``: the existing node when its latest value is equal, else a new version."""
        full_name = f"{class_name}:{identity}" if class_name is not None else identity
        latest = self._latest.get(full_name)
        if latest is not None and latest.value == value and not force_new_version:
            return latest
        version = latest.version + 1 if latest else 1
        return self._add_node(full_name, identity, class_name, version, value, category, comment)

    def _add_node(self, full_name: str, identity: str, class_name: str | None, version: int, value: str,
                  category: str, comment: str | None) -> Var:
        node_id = f"{identity}@{version}"
        full_node_id = f"{full_name}@{version}"
        node = {**self._common(), "name": identity, "version": version, "value": value, "comment": comment,
                "category": category, "class_name": class_name, "session_id": self._session, "metadata": {},
                "trigger_point": f"{self._filename}:0", "full_name": full_name, "node_id": node_id,
                "full_node_id": full_node_id}
        self.nodes.append(node)
        self._by_id[full_node_id] = node
        var = Var(full_node_id, full_name, version, value)
        self._latest[full_name] = var
        return var

    def latest(self, full_name: str) -> Var | None:
        """The latest version of a variable (``identity_only`` reads resolve to it)."""
        return self._latest.get(full_name)

    def mutate(self, before: Var, value: str, *, inputs: list[Var], mutation_category: str,
               op_name: str | None = None, comment: str | None = None) -> Var:
        """``comment_mutation``: ``before@v -> @v+1`` and each input -> ``@v+1``, in the scope's
        operation (``reuse_op=True``) or in a new operation named ``op_name``."""
        node = self._by_id[before.full_node_id]
        after = self._add_node(before.full_name, node["name"], node["class_name"], before.version + 1, value,
                               node["category"], node["comment"])
        op = self._open(op_name, mutation_category, comment) if op_name is not None else self._scope
        assert op is not None, "a mutation with reuse_op needs an operation scope"
        self._edge(op, before, after, mutation_category, comment or "Version lineage.")
        for source in inputs:
            self._edge(op, source, after, mutation_category, comment)
        return after

    # operations -----------------------------------------------------------------------------

    def _open(self, op_name: str, category: str, comment: str | None) -> _Op:
        op = _Op(self._next_id("op"), category)
        self.last_op = op.op_id
        self.operations.append({**self._common(), "op_id": op.op_id, "op_name": op_name, "comment": comment,
                                "category": category, "session_id": self._session, "metadata": {},
                                "trigger_point": f"{self._filename}:0"})
        return op

    def scope(self, op_name: str, category: str, comment: str | None = None) -> str:
        """``comment_op_scope``: open an operation that later links and reusing ops add edges to."""
        self._scope = self._open(op_name, category, comment)
        return self._scope.op_id

    def end_scope(self) -> None:
        self._scope = None

    def op(self, inputs: list[Var], outputs: list[Var], *, op_name: str | None = None,
           category: str = "operation", comment: str | None = None) -> str:
        """``comment_op``: the cartesian product of edges, in a new operation when ``op_name`` is given,
        else in the open scope (``reuse_op=True``: ``category`` is then the edges' only)."""
        op = self._open(op_name, category, comment) if op_name is not None else self._scope
        assert op is not None, "comment_op without a name needs an operation scope"
        sources = inputs or [self._none()]
        targets = outputs or [self._none()]
        for source in sources:
            for target in targets:
                self._edge(op, source, target, category, comment)
        return op.op_id

    def link(self, source: Var, target: Var, comment: str | None = None, category: str | None = None) -> None:
        """``comment_link``: one edge, in the open scope (its category by default) or the NONE operation."""
        if self._scope is None:
            self._edge(_Op("__none_op__", "link"), source, target, category or "link", comment)
        else:
            self._edge(self._scope, source, target, category or self._scope.category, comment)

    def _none(self) -> Var:
        existing = self._latest.get("COMMENT:NONE")
        if existing:
            return existing
        session, self._session = self._session, "__none__"
        var = self._add_node("COMMENT:NONE", "COMMENT:NONE", None, 1, "NONE", "sentinel", None)
        self._session = session
        return var

    def _edge(self, op: _Op, source: Var, target: Var, category: str, comment: str | None) -> None:
        self.edges.append({**self._common(), "edge_id": self._next_id("edge"), "session_id": self._session,
                           "op_id": op.op_id, "category": category,
                           "source_full_node_id": source.full_node_id,
                           "target_full_node_id": target.full_node_id, "comment": comment, "metadata": {},
                           "trigger_point": f"{self._filename}:0"})

    # export ---------------------------------------------------------------------------------

    def export(self) -> dict[str, Any]:
        """The exported document (``ExecNetwork.export_graph()``), with MemTraceBench's annotations."""
        return {"graph_id": self.graph_id, "user_id": self.user_id, "project_id": self.project_id,
                "storage_path": None, "strict": True, "driver_type": "in_memory",
                "created_at": (_EPOCH).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], "metadata": self.metadata,
                "data": {"nodes": self.nodes, "edges": self.edges, "operations": self.operations,
                         "sessions": self.sessions, "annotations": self.annotations}}


class NullGraph(Graph):
    """The same calls, nothing recorded: for counterfactual runs, whose outcome is all that counts."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.recording = False

    def _add_node(self, full_name: str, identity: str, class_name: str | None, version: int, value: str,
                  category: str, comment: str | None) -> Var:
        var = Var(f"{full_name}@{version}", full_name, version, value)
        self._latest[full_name] = var
        return var

    def mutate(self, before: Var, value: str, *, inputs: list[Var], mutation_category: str,
               op_name: str | None = None, comment: str | None = None) -> Var:
        if op_name is not None:
            self._open(op_name, mutation_category, comment)
        return self._add_node(before.full_name, "", None, before.version + 1, value, "", None)

    def _open(self, op_name: str, category: str, comment: str | None) -> _Op:
        self._counter += 1
        self.last_op = f"op-{self._counter}"
        return _Op(self.last_op, category)

    def _edge(self, op: _Op, source: Var, target: Var, category: str, comment: str | None) -> None:
        return None

    def session(self, category: str, comment: str, session_id: str | None = None,
                metadata: dict[str, Any] | None = None) -> str:
        return session_id or "session"

    def now(self) -> str:
        return ""
