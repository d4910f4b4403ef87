"""Per-graph facts the lineage engine asks for again and again, computed once.

Attribution runs one case at a time, but the cases of one span file share one
graph: tokenising every variable, the inverted index of memory contents,
ranking messages and the spectrum scores are graph-wide work.
:func:`graph_index` keeps one :class:`GraphIndex` per graph, built lazily
once, so the per-case work is only the walk along the evidence's lineage and
look-ups: analysing a graph costs time linear in its size plus, per failure,
time proportional to that failure's slice.

The index lives in the graph layer's per-graph cache
(:func:`memtrace_otel.graph.index.lookup`), which networkx empties on every
structural change; after changing node data in place, call
:func:`memtrace_otel.graph.clear_index`.

Thread safety: one index's lazy fields are filled idempotently (a race
computes the same value twice), the numbering of lines under a lock; the
index is read-only otherwise.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import networkx as nx

from memtrace_otel.attribution.presence import split_header, split_lines, tokenize
from memtrace_otel.attribution.ranking import DocumentRanker
from memtrace_otel.attribution.spectrum import ochiai_scores
from memtrace_otel.graph.index import forget, lookup, operation_nodes, position, variables_by_name
from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.graph.query import producer_of
from memtrace_otel.semconv import Category, VariableKind
from memtrace_otel.text import readable, sentences

__all__ = ["STORED_KINDS", "GraphIndex", "graph_index", "release_graph_index"]

STORED_KINDS = frozenset({VariableKind.MEMORY_UNIT, VariableKind.STORE})
"""Variable kinds that are memory: what a later question can be answered from."""
_READ_SIDE = frozenset({Category.RETRIEVAL, Category.RERANK})
_NOT_STORED = frozenset({
    VariableKind.MESSAGE, VariableKind.QUERY, VariableKind.ANSWER, VariableKind.PROMPT,
    VariableKind.RESPONSE, VariableKind.FACTS, VariableKind.VERDICT,
})
_INTERNAL = frozenset({VariableKind.PROMPT, VariableKind.RESPONSE})
_STEP = str(Category.LLM_CALL.value)
_DELETION_MARKER = "DELETED"
_RECORD_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{12,}(?![0-9a-f])")
"""A record id as stores write them (hex, uuid parts): what an id list and a unit's name share."""
_SPECIFIC_MESSAGES = 3
_ORIGIN_STEPS = 4
_NOT_ORIGIN = frozenset({VariableKind.PROMPT, VariableKind.QUERY, VariableKind.CONTEXT, VariableKind.ANSWER})
_STORE_SEARCH_STEPS = 3
_RECORD_TEXT_FIELDS = ("content", "memory", "text")
_QUOTE_WORDS = 3
_SPEAKER_FIELDS = ("name", "speaker", "speaker_name")
_BRACKETED = re.compile(r"\[[^\]]*\]")
Postings = dict[str, set[str]]

_KEY = "memtrace_otel.attribution.graph_index"


def _record_text_of(content: str) -> str | None:
    """A JSON record's text field (``content``, ``memory`` ...), stripped; ``None`` if it is not one."""
    try:
        record = json.loads(content)
    except ValueError:
        return None
    if isinstance(record, dict):
        said = next((v for k in _RECORD_TEXT_FIELDS if isinstance(v := record.get(k), str)), None)
        return said.strip() if said is not None else None
    return None


def _speaker_of(content: str) -> str | None:
    """The speaker a message's content names: a record's ``name`` field, else its chat header's name."""
    stripped = content.strip()
    if stripped[:1] == "{":
        try:
            record = json.loads(stripped)
        except ValueError:
            record = None
        if isinstance(record, dict):
            name = next((v for k in _SPEAKER_FIELDS if isinstance(v := record.get(k), str) and v.strip()),
                        None)
            if name is not None:
                return name.strip().lower()
            said = _record_text_of(stripped)
            stripped = said if said is not None else stripped
    header = _BRACKETED.sub("", split_header(stripped.splitlines()[0] if stripped else "")[0]).strip()
    return header.removesuffix(":").strip().lower() or None


def _listed_record_texts(content: str) -> list[str]:
    """Text fields of the records in the JSON lists of ``content``, at any depth."""
    try:
        value = json.loads(content)
    except ValueError:
        return []
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            for element in item:
                if isinstance(element, dict) and isinstance(said := element.get("content"), str):
                    found.append(said.strip())
                else:
                    stack.append(element)
        elif isinstance(item, dict):
            stack.extend(v for v in item.values() if isinstance(v, (list, dict)))
    return found


class _Numbering:
    """Numbers for texts (a graph's distinct lines), with their tokens."""

    def __init__(self) -> None:
        self.known: dict[str, int] = {}
        self.texts: list[str] = []
        self.tokens: list[frozenset[str]] = []
        self._lock = threading.Lock()

    def numbers(self, texts: list[str]) -> frozenset[int]:
        """The numbers of ``texts``, numbering those not met before.

        >>> numbering = _Numbering(); sorted(numbering.numbers(["a b", "c"])), numbering.numbers(["c", "c"])
        ([0, 1], frozenset({1}))
        """
        known = self.known
        with self._lock:  # a number, once given, names one text for every thread
            for text in texts:
                if text not in known:
                    known[text] = len(self.texts)
                    self.texts.append(text)
                    self.tokens.append(tokenize(text))
        return frozenset(known[text] for text in texts)


def graph_index(G: nx.DiGraph) -> GraphIndex:
    """The index of ``G``, built once per graph (until the graph changes).

    >>> G = nx.DiGraph(); G.add_node("m@1", type="variable", name="m", version=1, content="hi")
    >>> graph_index(G) is graph_index(G), graph_index(G).has_content
    (True, True)
    >>> G.add_node("n@1"); graph_index(G).G is G
    True
    """
    return lookup(G, _KEY, GraphIndex)


def release_graph_index(G: nx.DiGraph) -> None:
    """Free the index of ``G`` (every variable's tokens and lines, its postings) once attribution is
    done with it; :func:`graph_index` builds it again if asked.

    >>> G = nx.DiGraph(); first = graph_index(G); release_graph_index(G); graph_index(G) is first
    False
    """
    forget(G, _KEY)


class GraphIndex:
    """Lazily computed, read-mostly facts about one graph."""

    def __reduce__(self) -> tuple[type[GraphIndex], tuple[nx.DiGraph]]:
        # A graph pickled for a worker process carries its cache; the index starts empty
        # there (its lazy parts, such as an embedding model, do not travel). The graph may
        # not be filled in yet when this runs, so __init__ must not read it.
        return (GraphIndex, (self.G,))

    def __init__(self, G: nx.DiGraph) -> None:
        self.G = G
        self._producers: dict[str, str | None] = {}
        self._tokens: dict[str, frozenset[str]] = {}
        self._lines: dict[str, list[frozenset[str]]] = {}
        self._line_texts: dict[str, list[str]] = {}
        self._pieces: dict[str, list[tuple[str, frozenset[str]]]] = {}
        self._postings: dict[str | None, Postings] | None = None
        self._truncated: dict[str | None, set[str]] = {}
        self._message_count = 0
        self._message_postings: Postings | None = None
        self._versions: dict[str, list[str]] | None = None
        self._retrieved_names: set[str] | None = None
        self._rankers: dict[tuple[bool, tuple[str, ...] | None], DocumentRanker] = {}
        self._message_stores: dict[str | None, list[str]] | None = None
        self._ochiai: dict[str, float] | None = None
        self._has_content: bool | None = None
        self._marker_deletes: dict[str, list[tuple[int, str, str]]] | None = None
        self._scopes: dict[str, str] | None = None
        self._unit_ids: dict[str, list[str]] | None = None
        self._referenced: dict[str, list[str]] = {}
        self._message_sentences: dict[str, frozenset[str]] | None = None
        self._query_reads: list[tuple[int, frozenset[str]]] | None = None
        self._origins: dict[str, list[str]] = {}
        self._held: dict[str, frozenset[str] | None] = {}
        self._line_sources: dict[str, list[frozenset[str]]] = {}
        self._quoted_lines: dict[str, frozenset[str]] = {}
        self._lines_numbered = _Numbering()
        self._line_sets: dict[str, frozenset[int]] = {}
        self._speakers: dict[str, str | None] = {}
        self._message_texts: dict[str, str] | None = None
        self._turns: dict[str, int] | None = None
        self._idf: dict[str, float] = {}

    @property
    def has_content(self) -> bool:
        """Whether any variable has captured content (else attribution runs on lineage alone)."""
        if self._has_content is None:
            self._has_content = any(
                d.get("type") == VARIABLE and d.get("content") for _, d in self.G.nodes(data=True)
            )
        return self._has_content

    # -- nodes ------------------------------------------------------------
    # The per-case walks ask for node data millions of times per span file; ``G.nodes[n]``
    # goes through a view object each time, ``G._node[n]`` is the same attribute dict (live,
    # so nothing here can go stale) at the cost of one dict look-up.
    def data(self, node: str) -> dict[str, Any]:
        return self.G._node[node]  # type: ignore[no-any-return]

    def order(self, op: str) -> int:
        return int(self.G._node[op].get("order", 0))

    def category(self, op: str) -> str:
        return str(self.G._node[op].get("category", Category.OTHER))

    def content(self, variable: str) -> str | None:
        return self.G.nodes[variable].get("content")

    def text(self, variable: str, *, resolve: bool = True) -> str | None:
        """What the variable's content says (:func:`memtrace_otel.text.readable`: a JSON record's text
        field, dated in words, relative times resolved unless ``resolve=False``); ``None`` without
        content. Searching for evidence reads it unresolved (the resolved date is the header's)."""
        content = self.G.nodes[variable].get("content")
        return readable(content, resolve=resolve) if isinstance(content, str) else content

    def message_text(self, message: str) -> str | None:
        """What a message variable says, as its record's text field (or its whole content)."""
        content = self.G.nodes[message].get("content")
        if not isinstance(content, str):
            return None
        said = _record_text_of(content)
        return said if said is not None else content.strip()

    def held_messages(self, variable: str) -> frozenset[str] | None:
        """The texts of the messages ``variable`` holds as records (a buffer, a memcell, a window of
        raw messages: JSON lists of records whose text is a message's, word for word); ``None`` when
        it holds no message as a record.

        A container of messages carries a message by holding its record: a topic
        summary or title quoting part of a message it left out is not the message.
        """
        if variable in self._held:
            return self._held[variable]
        found: frozenset[str] | None = None
        content = self.G.nodes[variable].get("content")
        if isinstance(content, str) and content.lstrip()[:1] in "[{":
            texts = _listed_record_texts(content)
            if texts:
                if self._message_texts is None:
                    self._message_texts = {}
                    for node, d in self.G.nodes(data=True):
                        if d.get("kind") == VariableKind.MESSAGE and (said := self.message_text(node)):
                            self._message_texts.setdefault(said, node)
                held = frozenset(t for t in texts if t in self._message_texts)
                found = held or None
        self._held[variable] = found
        return found

    def identity(self, variable: str) -> str:
        """The variable's name without the copy suffix (``name~k`` -> ``name``): what a graph that gives
        each writer of one value its own copy still calls one variable."""
        name = str(self.G.nodes[variable].get("name") or variable)
        base, tilde, k = name.rpartition("~")
        return base if tilde and k.isdigit() else name

    def original(self, variable: str) -> str | None:
        """The variable ``variable`` is a copy of (same name and version, same content), or ``None``.

        A graph that links values by identity gives each later writer of one value
        its own copy, ``name~k@version`` (:mod:`memtrace_otel.spans.smartcomment`):
        a search that returns a stored memory writes a copy of it. The copy says
        what the memory says, and carries what it carries.
        """
        d = self.G.nodes[variable]
        base, version = self.identity(variable), d.get("version")
        if base == d.get("name") or version is None:
            return None
        original = f"{base}@{version}"
        if original not in self.G or self.G.nodes[original].get("hash") != d.get("hash"):
            return None
        return original

    def tokens(self, variable: str) -> frozenset[str]:
        found = self._tokens.get(variable)
        if found is None:
            found = tokenize(self.text(variable))
            self._tokens[variable] = found
        return found

    def lines(self, variable: str) -> list[frozenset[str]]:
        """Token sets of the lines of a variable's content (one per stored sentence)."""
        found = self._lines.get(variable)
        if found is None:
            found = [tokenize(line) for line in split_lines(self.text(variable))]
            self._lines[variable] = found
        return found

    def line_texts(self, variable: str) -> list[str]:
        """The lines of a variable's content (:func:`.presence.split_lines`), :meth:`lines`' texts.
        Shared: not to be changed."""
        # Kept for the presence test of a gold in common words, which reads each version of a window
        # again for every evidence message (other callers split the text once and keep its tokens).
        found = self._line_texts.get(variable)
        if found is None:
            found = self._line_texts[variable] = split_lines(self.text(variable))
        return found

    def pieces(self, variable: str) -> list[tuple[str, frozenset[str]]]:
        """Statements of a variable's content with their tokens: its lines, cut into sentences and at
        semicolons (a merged memory joins its facts with ``;``), headers left out.

        What a paraphrase of one fact is compared with: a line that states several
        facts resembles none of them as a whole.
        """
        found = self._pieces.get(variable)
        if found is None:
            found = []
            for line in (self.text(variable) or "").splitlines():
                for sentence in sentences(split_header(line)[1]):
                    found.extend((p, tokenize(p)) for p in (s.strip() for s in sentence.split(";")) if p)
            self._pieces[variable] = found
        return found

    def quoted_message(self, piece: str) -> frozenset[str]:
        """Message variables one of whose sentences ``piece`` is, word for word (empty if none).

        A statement quoted from a message is that message, not a paraphrase of another.
        """
        if self._message_sentences is None:
            found: dict[str, set[str]] = defaultdict(set)
            for node, d in self.G.nodes(data=True):
                if d.get("type") == VARIABLE and d.get("kind") == VariableKind.MESSAGE and d.get("content"):
                    for text, _ in self.pieces(node):
                        found[_verbatim(text)].add(node)
            self._message_sentences = {k: frozenset(v) for k, v in found.items()}
        return self._message_sentences.get(_verbatim(piece), frozenset())

    def speaker(self, message: str) -> str | None:
        """Who said a message: its record's ``name`` (or ``speaker``) field, else its chat header's name
        (``[8 May 2023] Caroline: ...``); ``None`` when neither says."""
        if message in self._speakers:
            return self._speakers[message]
        content = self.G.nodes[message].get("content")
        found = _speaker_of(content) if isinstance(content, str) else None
        self._speakers[message] = found
        return found

    def line_sources(self, variable: str) -> list[frozenset[str]]:
        """For each line of :meth:`lines`, the messages it quotes word for word (a sentence of three
        words or more that is one of theirs; empty when it quotes none).

        A window or buffer of raw messages holds each message as a line: that line
        says what its own message said, and is no other message's statement.
        """
        found = self._line_sources.get(variable)
        if found is None:
            found = self._line_sources[variable] = [
                self.line_quotes(text) for text in self.line_texts(variable)]
        return found

    def line_quotes(self, line: str) -> frozenset[str]:
        """The messages one line (of :meth:`line_texts`) quotes word for word: :meth:`line_sources` of
        that line alone."""
        # Kept per line text: the versions of a window of raw messages repeat most of their lines.
        found = self._quoted_lines.get(line)
        if found is None:
            quoted: set[str] = set()
            for sentence in sentences(split_header(line)[1]):
                if len(sentence.split()) >= _QUOTE_WORDS:
                    quoted |= self.quoted_message(sentence)
            found = self._quoted_lines[line] = frozenset(quoted)
        return found

    # The versions of a window of raw messages share most of their lines: a test that keeps what it
    # decided of each distinct line by its number answers for a whole version with set operations,
    # and reads only the lines it has not met before.
    def line_set(self, variable: str) -> frozenset[int]:
        """The distinct lines of :meth:`line_texts`, by number in this graph (:meth:`line_text`,
        :meth:`line_tokens`, :meth:`line_number`)."""
        found = self._line_sets.get(variable)
        if found is None:
            found = self._line_sets[variable] = self._lines_numbered.numbers(self.line_texts(variable))
        return found

    def line_text(self, number: int) -> str:
        """The line numbered ``number`` by :meth:`line_set`."""
        return self._lines_numbered.texts[number]

    def line_tokens(self, number: int) -> frozenset[str]:
        """The tokens of the line numbered ``number`` (an element of :meth:`lines`)."""
        return self._lines_numbered.tokens[number]

    def line_number(self, line: str) -> int:
        """The number :meth:`line_set` gave ``line`` (a line of a variable it was asked about)."""
        return self._lines_numbered.known[line]

    def producer(self, variable: str) -> str | None:
        try:
            return self._producers[variable]
        except KeyError:
            found = self._producers[variable] = producer_of(self.G, variable)
            return found

    def produced_at(self, variable: str) -> int:
        """Execution order of the variable's producer; -1 for external inputs (always there)."""
        producer = self.producer(variable)
        return self.order(producer) if producer is not None else -1

    def inputs(self, op: str) -> list[str]:
        return [v for v, _, d in self.G.in_edges(op, data=True) if d.get("role") == "input"]

    def outputs(self, op: str) -> list[str]:
        return [v for _, v, d in self.G.out_edges(op, data=True) if d.get("role") == "output"]

    def readers(self, variable: str) -> list[str]:
        return [
            s for s in self.G.successors(variable) if self.G._node[s].get("type") == OPERATION
        ]

    def is_step(self, op: str) -> bool:
        """Whether ``op`` is an internal step (a model call) of another operation, not one of its own."""
        d = self.G._node[op]
        return d.get("category") == _STEP or d.get("parent_operation") is not None

    def internal(self, variable: str) -> bool:
        """Whether ``variable`` is an operation's internal working (a prompt, a raw model response).

        What an operation is judged by is what it wrote into memory or towards the
        answer; its prompt holds the message it read whatever it then wrote.
        """
        return self.G.nodes[variable].get("kind") in _INTERNAL

    def written(self, op: str) -> list[str]:
        """Outputs of ``op`` that are its effect: every output but its own prompts and raw model responses.

        A prompt or response another operation reads is a product, not internal
        working: MemBase files the facts an extraction passes on as ``llm_response``.
        """
        return [v for v in self.outputs(op) if not self.internal(v) or any(
            reader != op and not self.is_step(reader) for reader in self.readers(v))]

    def origin_messages(self, variable: str) -> list[str]:
        """The messages a stored variable was written from: backward through its producers' inputs
        (prompts, queries and retrieved contexts aside) for a few operations, sorted.

        What ties an extracted memory (third-person, paraphrased) to the turn that said it.
        """
        found = self._origins.get(variable)
        if found is None:
            messages: set[str] = set()
            frontier, seen = [variable], {variable}
            for _ in range(_ORIGIN_STEPS):
                ops = {p for v in frontier if (p := self.producer(v)) is not None
                       and self.category(p) not in _READ_SIDE}
                frontier = []
                for op in sorted(ops):
                    for v in self.inputs(op):
                        kind = self.G.nodes[v].get("kind")
                        if v in seen or kind in _NOT_ORIGIN or kind in STORED_KINDS:
                            continue  # an older memory merged in came from other messages
                        seen.add(v)
                        (messages.add(v) if kind == VariableKind.MESSAGE else frontier.append(v))
                if not frontier:
                    break
            found = self._origins[variable] = sorted(messages)
        return found

    def query_reads(self) -> list[tuple[int, frozenset[str]]]:
        """(order, queries read) of every retrieval and rerank that reads a query, in execution order:
        where each question's search starts."""
        if self._query_reads is None:
            found = []
            for op in operation_nodes(self.G):
                if self.category(op) in _READ_SIDE:
                    queries = frozenset(v for v in self.inputs(op)
                                        if self.G.nodes[v].get("kind") == VariableKind.QUERY)
                    if queries:
                        found.append((self.order(op), queries))
            self._query_reads = sorted(found, key=lambda item: item[0])
        return self._query_reads

    def is_deletion_marker(self, variable: str) -> bool:
        """A ``DELETED`` marker: how MemBase's tracing records that an operation deleted a memory.

        smartcomment has no tombstones: a deletion links the deleted unit to a new
        variable whose value is the word ``DELETED``.
        """
        content = self.G.nodes[variable].get("content")
        return isinstance(content, str) and content.strip() == _DELETION_MARKER

    def marker_deletes(self, name: str) -> list[tuple[int, str, str]]:
        """``(order, op, marker)`` for each operation that deleted a version of ``name`` by a marker.

        An operation that writes a deletion marker deletes the stored units it
        read and wrote no new version of (MemBase's decision operation reads a
        unit only to update or delete it).
        """
        if self._marker_deletes is None:
            found: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
            for op in operation_nodes(self.G):
                markers = [v for v in self.outputs(op) if self.is_deletion_marker(v)]
                if not markers:
                    continue
                rewritten = {self.G.nodes[v].get("name") for v in self.outputs(op)}
                for variable in self.inputs(op):
                    name = self.G.nodes[variable].get("name")
                    if (name not in rewritten and self.is_stored(variable)
                            and not self.is_deletion_marker(variable)):
                        found[str(name)].append((self.order(op), op, markers[0]))
            self._marker_deletes = dict(found)
        return self._marker_deletes.get(name, [])

    # -- memory -------------------------------------------------------------
    def versions(self, name: str) -> list[str]:
        """Variable ids of ``name``, oldest version first."""
        if self._versions is None:
            self._versions = {n: [v for _, v in vs] for n, vs in variables_by_name(self.G).items()}
        return self._versions.get(name, [])

    def store_of(self, variable: str) -> str | None:
        """The memory store (``gen_ai.memory.store.id``) whose operation wrote ``variable``, if named.

        A writer that names no store (only GenAI memory spans carry one) leaves the
        store the retrievals that read the unit's versions searched, when they agree.
        """
        producer = self.producer(variable)
        found = _store_id(self.G.nodes[producer]) if producer is not None else None
        if found is None and self.G.nodes[variable].get("kind") in STORED_KINDS:
            versions = self.versions(self.G.nodes[variable].get("name", ""))
            searched = {_store_id(self.G.nodes[op]) for v in versions
                        for op in self.readers(v) if self.category(op) in _READ_SIDE}
            searched.discard(None)
            if len(searched) == 1:
                found = searched.pop()
        return found

    def scope(self, node: str) -> str | None:
        """The memory scope (one user's memories in a shared store) of a retrieval or a stored variable.

        ``None`` when nothing says. A store such as mem0's collection is shared by
        every user; a search sees one user's memories (its filters), which the
        spans do not name. The scope is read off what searches returned: the
        memories one retrieval returned are of one scope, and so are those one
        ingestion trace (no generation in it) searched, wrote and rewrote. A
        group no retrieval read from has no known scope. A scope is named by its
        smallest member, so it does not depend on hash order.
        """
        if self._scopes is None:
            self._scopes = _scopes(self)
        d = self.G.nodes[node]
        key = f"op {node}" if d.get("type") == OPERATION else f"unit {d.get('name')}"
        return self._scopes.get(key)

    def referenced_units(self, variable: str) -> list[str]:
        """Names of the stored units whose record ids ``variable``'s content lists (sorted; shared: not to
        be changed).

        Retrievals often pass on ids and scores, not texts (``e3050ba3…-0.033,
        6565…``): such a list stands for the records it names.
        """
        found = self._referenced.get(variable)
        if found is None:
            # Kept per variable: each evidence message's walk asks it of the same contexts and results.
            found = self._referenced[variable] = self._referenced_units(variable)
        return found

    def referenced_states(self, variable: str, unproduced: int) -> list[str]:
        """The versions of :meth:`referenced_units` current when ``variable`` was written (at execution
        order ``unproduced`` for a variable no operation wrote): what a list of ids stood for then."""
        when = self.produced_at(variable)
        when = unproduced if when < 0 else when
        return [state for name in self.referenced_units(variable)
                if (state := self.state_at(name, when)) is not None]

    def _referenced_units(self, variable: str) -> list[str]:
        content = self.content(variable)
        if not content:
            return []
        if self._unit_ids is None:
            ids: dict[str, set[str]] = defaultdict(set)
            for name in self._stored_names():
                for token in _RECORD_ID.findall(name.rsplit("/", 1)[-1].lower()):
                    ids[token].add(name)
            self._unit_ids = {token: sorted(names) for token, names in ids.items()}
        found = {name for token in _RECORD_ID.findall(content.lower())
                 for name in self._unit_ids.get(token, ())}
        own = self.G.nodes[variable].get("name")
        return sorted(found - {own})

    def _stored_names(self) -> list[str]:
        return sorted({str(d.get("name")) for _, d in self.G.nodes(data=True)
                       if d.get("type") == VARIABLE and d.get("kind") in STORED_KINDS})

    def is_stored(self, variable: str) -> bool:
        """Whether ``variable`` is memory (a unit or store a later question can draw on)."""
        d = self.G._node[variable]
        if d.get("kind") in STORED_KINDS:
            return True
        if d.get("kind") in _NOT_STORED:
            return False
        if self._retrieved_names is None:
            self._retrieved_names = {
                self.G.nodes[v]["name"]
                for op, od in self.G.nodes(data=True)
                if od.get("type") == OPERATION and od.get("category") in _READ_SIDE
                for v in self.inputs(op)
            }
        return d.get("name") in self._retrieved_names

    def state_at(self, name: str, when: int) -> str | None:
        """The version of ``name`` current just before execution order ``when``.

        ``None`` before the first version, and after a deletion marker removed the
        unit (a tombstone version is returned as the state: it says deleted itself).
        """
        current = None
        for variable in self.versions(name):
            if self.produced_at(variable) < when:
                current = variable
        if current is not None:
            written = self.produced_at(current)
            if any(written < order < when for order, _, _ in self.marker_deletes(name)):
                return None
        return current

    def stored_variables(self) -> dict[str | None, Postings]:
        """Inverted index per store: store id -> token -> stored variables (every version) holding it.

        Variables whose writer names no store are under ``None``. Truncated
        contents are also listed per store (:meth:`candidates` needs them).
        """
        if self._postings is None:
            postings: dict[str | None, Postings] = defaultdict(lambda: defaultdict(set))
            for node, d in self.G.nodes(data=True):
                if d.get("type") == VARIABLE and d.get("content") and self.is_stored(node):
                    store = self.store_of(node)
                    for token in self.tokens(node):
                        postings[store][token].add(node)
                    if len(d["content"]) < int(d.get("size") or 0):
                        self._truncated.setdefault(store, set()).add(node)
            self._postings = postings
        return self._postings

    def candidates(self, tokens: Iterable[str], *, required: Iterable[str] = (),
                   stores: Iterable[str] | None = None) -> set[str]:
        """Stored variables that can carry ``tokens``: holding any of them, and all of ``required``.

        Parameters
        ----------
        tokens:
            A variable must hold one of these to be a candidate.
        required:
            Tokens a carrier must hold (exact ones such as numbers); a variable
            whose content is truncated is kept without them (the cut-off part
            may hold them).
        stores:
            Only variables of these stores (and of no named store); all when ``None``.

        Returns
        -------
        set
            Found through the inverted index: the cost is the size of the
            smallest posting list asked for, not the size of the memory.
        """
        wanted, needed = frozenset(tokens), list(dict.fromkeys(required))
        by_store = self.stored_variables()
        chosen = list(by_store) if stores is None else [*dict.fromkeys(stores), None]
        found: set[str] = set()
        for store in chosen:
            postings = by_store.get(store)
            if postings:
                found |= _holding(postings, wanted, needed, self.tokens)
                found |= {v for v in self._truncated.get(store, ()) if not wanted.isdisjoint(self.tokens(v))}
        return found

    # -- message statistics -----------------------------------------------
    def _messages(self) -> Postings:
        if self._message_postings is None:
            postings: Postings = defaultdict(set)
            count = 0
            for node, d in self.G.nodes(data=True):
                if d.get("type") == VARIABLE and d.get("kind") == VariableKind.MESSAGE and d.get("content"):
                    count += 1
                    for token in self.tokens(node):
                        postings[token].add(node)
            self._message_count = count
            self._message_postings = postings
        return self._message_postings

    def turn(self, message: str) -> int | None:
        """The message's place in the conversation: its rank among the messages by when they were first
        read (the order an app ingested them in); ``None`` for a variable no operation read as a message."""
        if self._turns is None:
            first: dict[str, int] = {}
            for node, d in self.G.nodes(data=True):
                if d.get("type") == VARIABLE and d.get("kind") == VariableKind.MESSAGE:
                    orders = [self.order(op) for op in self.readers(node)]
                    if orders:
                        first[node] = min(orders)
            self._turns = {m: rank for rank, m in enumerate(sorted(first, key=lambda m: (first[m], m)))}
        return self._turns.get(message)

    def idf(self, token: str) -> float:
        """Inverse document frequency of ``token`` over the message variables (smoothed)."""
        # Kept per token: scoring the answerer's context asks it of every word of every line.
        found = self._idf.get(token)
        if found is None:
            df = len(self._messages().get(token, ()))
            found = self._idf[token] = math.log(1 + (self._message_count + 1) / (df + 0.5))
        return found

    def specific(self, tokens: Iterable[str]) -> bool:
        """Whether so few messages hold all of ``tokens`` together that they identify a fact."""
        postings = self._messages()
        sets = sorted((postings.get(t, set()) for t in tokens), key=len)
        if not sets:
            return False
        return len(sets[0].intersection(*sets[1:])) <= _SPECIFIC_MESSAGES

    # -- graph-wide rankings ------------------------------------------------
    def message_ranker(self, *, use_embeddings: bool = True, stores: Iterable[str] | None = None
                       ) -> DocumentRanker:
        """The ranker of the messages (first versions with content) of ``stores``, built once per choice.

        A message belongs to the stores its writer and readers name, and to
        every store when they name none; ``stores=None`` ranks all messages.
        Another user's messages cannot be this question's evidence, and
        ranking only the question's own keeps a case's cost to its memory's size.
        """
        key = (use_embeddings, None if stores is None else tuple(sorted(set(stores))))
        ranker = self._rankers.get(key)
        if ranker is None:
            by_store = self._messages_by_store()
            chosen = list(by_store) if key[1] is None else [*key[1], None]
            where = position(self.G)
            ids = sorted({m for store in chosen for m in by_store.get(store, ())}, key=where.__getitem__)
            documents = {m: readable(self.G.nodes[m]["content"], resolve=False) for m in ids}
            ranker = DocumentRanker(documents, use_embeddings=use_embeddings)
            self._rankers[key] = ranker
        return ranker

    def _messages_by_store(self) -> dict[str | None, list[str]]:
        if self._message_stores is None:
            by_store: dict[str | None, list[str]] = defaultdict(list)
            for node, d in self.G.nodes(data=True):
                if (d.get("type") == VARIABLE and d.get("content") and d.get("kind") == VariableKind.MESSAGE
                        and not any(e.get("role") == "version" for e in self.G.pred[node].values())):
                    for store in self._stores_around(node) or (None,):
                        by_store[store].append(node)
            self._message_stores = by_store
        return self._message_stores

    def _stores_around(self, variable: str) -> list[str]:
        """Stores the first store-naming operations downstream of ``variable`` name (a few steps at most).

        A message is ingested by operations that often name no store (only GenAI
        memory spans carry ``gen_ai.memory.store.id``); the write into memory a
        step or two later does.
        """
        G, found = self.G, set[str]()
        frontier, seen = [variable], {variable}
        for _ in range(_STORE_SEARCH_STEPS):
            ops = [op for v in frontier for op in G._succ[v] if op not in seen]
            seen.update(ops)
            named = {op: _store_id(G.nodes[op]) for op in ops}
            found.update(store for store in named.values() if store)
            frontier = [v for op in ops if not named[op] for v in G._succ[op] if v not in seen]
            seen.update(frontier)
        return sorted(found)

    def ochiai(self) -> dict[str, float]:
        """Spectrum suspiciousness of the operations (computed on first use: it walks every slice)."""
        if self._ochiai is None:
            self._ochiai = ochiai_scores(self.G)
        return self._ochiai


def _scopes(index: GraphIndex) -> dict[str, str]:
    """Union-find over retrievals and unit names (see :meth:`GraphIndex.scope`): member -> scope."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(members: list[str]) -> None:
        roots = sorted({find(m) for m in members})
        for root in roots[1:]:
            parent[root] = roots[0]

    G = index.G
    by_trace: dict[str, list[str]] = defaultdict(list)
    answering: set[str] = set()
    for op in operation_nodes(G):
        d = G.nodes[op]
        trace = str(d.get("trace_id"))
        if d.get("category") == Category.GENERATION:
            answering.add(trace)
        if d.get("category") in _READ_SIDE:
            returned = [f"unit {G.nodes[v].get('name')}" for v in index.inputs(op) if index.is_stored(v)]
            if returned:
                union([f"op {op}", *returned])
            by_trace[trace].extend(returned)
        elif not index.is_step(op):
            by_trace[trace].extend(f"unit {G.nodes[v].get('name')}" for v in index.outputs(op)
                                   if index.is_stored(v))
    for trace in sorted(by_trace):
        if trace not in answering and by_trace[trace]:
            union(by_trace[trace])
    # A group no retrieval ever read from says nothing of which search could have returned its units.
    searched = {find(m) for m in parent if m.startswith("op ")}
    return {member: find(member) for member in sorted(parent) if find(member) in searched}


_BRACKETS = re.compile(r"\[[^\]]*\]")


def _verbatim(text: str) -> str:
    """``text`` without bracketed notes (resolved times, photo captions), spacing and case: for
    telling a quoted sentence."""
    return " ".join(_BRACKETS.sub(" ", text).lower().split())


def _store_id(data: dict[str, Any]) -> str | None:
    store = data.get("store_id")
    return store if isinstance(store, str) and store else None


def _holding(postings: Postings, wanted: frozenset[str], needed: list[str],
             tokens: Callable[[str], frozenset[str]]) -> set[str]:
    """Variables of one store's ``postings`` holding any of ``wanted`` and all of ``needed``."""
    if not needed:
        found: set[str] = set()
        for token in wanted:
            found |= postings.get(token, set())
        return found
    lists = sorted((postings.get(t, set()) for t in needed), key=len)
    return {v for v in lists[0] if all(v in p for p in lists[1:]) and not wanted.isdisjoint(tokens(v))}
