"""The offline ``lineage`` engine: follow the evidence, find where its information was lost.

MemTrace's rule: the root cause is the earliest operation, in execution order,
that is locally faulty for its own role and decisive. This engine reads that
off the graph without a model:

1. **Evidence.** The evaluation's evidence ids name message variables (an app's
   own ids, ``msg:D3:5``, match ``D3:5``); without them, messages are ranked
   against question + gold (BM25 and embeddings, fused by reciprocal rank),
   then reordered by how well each fits the question and the failed
   prediction and, with a gold, says it (:mod:`.evidence`).
2. **Information.** What the answer needed (:mod:`.presence`): the gold's
   content tokens the evidence holds (numbers and dates exactly) and the
   evidence sentence stating them, or the evidence's own content when there
   is no usable gold. Stored records are read as what they say
   (:func:`memtrace_otel.text.readable`: a JSON record's text, its timestamp
   as a date, relative times resolved against it). A variable carries the
   information when its words do, or when one of its statements paraphrases
   the evidence sentence (offline embeddings) and keeps the answer's exact
   tokens, the gold's names, numbers and months the message said (no
   paraphrase rewords a name) and half the gold's words, or says the whole
   gold and all the question asks by that the evidence sentence holds (the
   person asked about at least; not for a date gold), or -- an abstractive gold, none of its
   words in the message -- was written from the message and restates part of
   it (:mod:`.carrying`). A date gold is an event's: a statement carries it
   only with the words the question asks the event by that the evidence
   sentence says ("hurt" of "When did Melanie get hurt?"; a fact telling it
   as "an injury" keeps the date of no event the question names), unless a
   unit of the evidence's day says them (:func:`.survival.untold_event`).
3. **Read side** (the question's retrievals, reranks and generation: those on
   the answer's history, in its trace, or reading its query; another
   question's are left out): the first operation whose inputs carry the
   information (for a retrieval, its own store or user scope does) and whose
   outputs do not is to blame -- the op that wrote the answer a
   ResponseError whatever its category, a retrieval or rerank a
   RetrievalError. A unit alive in the searched scope and not returned is
   that search's RetrievalError (one the answerer's context holds was
   returned: the search is not shown to have missed it, and yields to
   another evidence message's verdict or the reader's). A unit from elsewhere (another message's
   saying of the fact) counts so only when no loss on the evidence's own
   lineage came first and decided: an extraction that stored none of it
   did not when the unit's write read memory descended from the evidence (a
   memory system's update decision reads the similar memories), or when the
   unit is at least as close to the question (offline embeddings) as the
   statements the extraction handed on (the message's sentence when it wrote
   none): the search would have passed over a repaired extraction's fact too;
   a lost unit did not when the alive one is at least as close to the
   question: the search would have passed over it too. That holds also for
   an alive unit on the evidence's lineage that another message's write made
   after reading the evidence's unit: it tells that message's fact, and when
   the evidence's own unit was lost first, the loss decided unless the search
   would have passed over the lost unit too. With one search per
   store (a mem0 app searches each speaker), an earlier search of another
   store that passed over a unit saying the whole answer failed first
   (whenever it ran, when the blamed search's carrier is a turn of another
   speaker than the one asked that said none of the gold; a date gold is
   said whole there by a unit dated otherwise than the day its message was
   said, "last month" resolved: its sentence told the date); and a
   search that passed over a carrier decided nothing when another search
   returned a carrier written from the evidence, or one saying the whole
   answer: the reader had it either way. A search (or a step of one) that
   read a carrier on the evidence's lineage and passed on neither it nor a
   memory stating the whole gold, only other memories sharing some of the
   gold's words, lost the fact (RetrievalError): such a memory may tell
   another event, and the answer failed on it. What an op passed on is read
   off its own outputs (the unit's words in one, or its id listed): a step
   that listed the evidence's episode among its candidates handed it on,
   and the later step that dropped it lost it. Nor did one that passed over (or a
   reader that had) a carrier of the evidence sentence's fact holding under
   half of what the message said of the gold, when another sentence of the
   message stated the answer and the extraction that read it kept none of
   it: a repaired search or reader would have had only that fragment, and
   the extraction lost the answer first. Nor did a search that returned a
   unit written from the evidence that the failed answer restates, when the
   unit lacks gold words its message's sentence said: the reader gave back
   what the extraction kept, and the extraction lost the rest.
4. **Write side** (before the question, forward from the evidence): an
   operation is judged by what it wrote (memory units, versions, tombstones,
   what it passed on), never by its prompts, raw model responses or model-call
   steps. If no memory unit holds the information when the question is
   asked, either some unit held it and the op that removed the last one is to
   blame, or none ever did and the op that read a carrier and wrote none is.
   The error type is the op's effect: a new version without it is an
   UpdateError, a tombstone or a ``DELETED`` marker a DeletionError (a
   window trim's tombstone, an update-role op's, stays an UpdateError), no
   unit with it an ExtractionError; the category only decides what the
   effect leaves open. Before blaming an extraction, the statement it wrote
   about the fact is followed into memory (:mod:`.survival`, by its words,
   not by the presence test): if a later write removed every copy of it
   before the question, that write is the decisive fault (a repaired
   extraction would have met it too), unless the statement kept none of the
   gold its sentence said (two words or more, or a name: a lone plain word
   may be said by a synonym), when the removed units never held the answer
   and the extraction is to blame; such a loss on the evidence's own
   lineage comes before the loss of a unit from elsewhere; if a unit still
   held it when the question was asked and the answer's context does not,
   the question's search of that unit's store missed it (RetrievalError),
   unless the statement lacks some of the gold and keeps none of what the
   question asks about (its words beyond names and dates: nothing to find
   it by) while its message stated the answer;
   if the context held it with part of the gold (and much of the sentence
   stating it, or more than the question's own words), the reader had part
   of the answer (ResponseError), unless the failed answer restates the
   statement (the reader gave what memory said, and the extraction had left
   the rest out), or, the statement having left out gold words its message's
   sentence said, another context line holding as much of the question (the
   reader answered from the line that best matched the question: the statement
   did not read as the answer); a statement with none of the gold is a lossy
   extraction. Nor is the reader blamed, whatever of the gold the statement (or
   a context line the presence test sees carrying the fact) kept, when the
   failed answer restates the context line most about the question (its share
   of the line's and the question's words, by IDF) and that line lacks the
   gold: the reader looked where a reader looks, and the fact did not read as
   the answer there; the extraction that wrote it so is blamed.
   An extraction whose statements are all about other parts of its message is
   not shown to have dropped the fact (an evidence id may name the turn beside
   the one saying it, an abstractive gold is inferred): if memory held a unit
   stating the whole gold (with a word of the question, or written from a
   message said the same day), or the units it wrote restating the message,
   alive and not returned, the question's earliest search of their store is
   blamed -- the units it wrote only when the evidence sentence does not state
   the answer (half the gold's words): one that does is no turn beside the
   answer, and what the extraction kept of its other parts could not have
   answered had the search returned it; nor when the message said gold words
   and none of those units keeps one, for the same reason. Nor is a unit of
   another message stating the gold such a search's fault when the evidence
   sentence said every word of the gold, two words or more or a name, number
   or month, and the extraction was not shown that unit (an additive
   extractor writes only what is new): the message said the fact, and the
   extraction dropped it.
   Nor is one that wrote nothing after reading a memory stating the fact (an
   additive extractor is shown the similar memories and writes only new
   facts): the search that passed over that memory is. Nor is one whose
   statement the update decision that read its facts found already stored (a
   memory it was shown keeps the statement, and it wrote nothing new): the
   statement is followed into that memory.
   A loss of the evidence's own fact (an extraction that dropped it, a
   removal of its unit) yields to a later write, before the question, that
   removed a unit of the evidence's day stating the whole gold with a word of
   the question: the turn beside the one an evidence id names often says the
   answer, and memory held it until that write. An extraction that wrote only
   about other parts of its message, or read one whose sentence does not state
   the answer, yields, too, to the question's earliest search of a store
   holding (alive, not returned) a unit of a turn beside the evidence, two
   either side that day, stating the whole gold (not a date or a count), though
   it names neither the person asked nor what the question asks by: the other
   speaker's reply said the answer back, or the turn beside said it, and memory
   held it.

When several evidence messages each point at a different operation, the
earliest in execution order wins (MemTrace's rule; a verdict is grounded in
the gold's words only when the evidence sentence states them, not when it
asks) among those of a message whose sentence states the whole gold, when
one does (that message needed no other: another's lost part decided
nothing), unless it is an extraction
that dropped its message's part, or a write that removed its message's unit,
while a unit stating the whole gold was stored (another verdict's later write
removed it: that write was decisive, and competes though its own message did
not say the gold's words, a photo turn whose fact names them), or an extraction
whose statements are all about other things (an evidence id may name a turn
beside the one that says the answer); operations of the same
moment, and the no-evidence fallback, are ordered by spectrum suspiciousness
over the graph's other evaluations (:mod:`.spectrum`).
Without captured content the same walk runs on lineage alone (a variable
derived from the evidence and not deleted counts as carrying it), with a
lower confidence.

Memory systems as MemBase traces them add shapes of their own, read by the
same rules: a container of raw messages (a buffer, an EverMemOS memcell)
holds a message only by holding its record, whatever its summary quotes
(:meth:`.GraphIndex.held_messages`); an
op that read the message itself and folded it lossily into a unit (a
long-context window) failed to extract it; a search is judged by what it
returned, not by the candidate list it wrote and read back for its own
check; a copy of a returned memory (``name~k``) carries what the memory
carries; and in a window of raw messages, another speaker's line carries
the evidence's fact only when it restates it. An extraction that rewrites
the memcell it read (raw messages) into an episode is judged as any
extractor is, by the statement it wrote, followed into memory (its own unit
included): a search step that returned memory without it, or a reader that
had it with part of the gold, is to blame. An episode dated in its own words
on the day a message said a relative time ("yesterday") keeps the date it
meant (:mod:`.anchored`); a record's timestamp alone does not. A unit written
from the evidence that carries it is on the evidence's lineage even when the
undated facts between them do not (mem0 dates a record by its message).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import networkx as nx

from memtrace_otel.attribution.base import (
    AMBIGUITY_MARGIN,
    Attribution,
    Candidate,
    Engine,
    ErrorType,
    FailureCase,
    NotAttributed,
    register_engine,
)
from memtrace_otel.attribution.carrying import Carrying, LineageCase, truncated
from memtrace_otel.attribution.evidence import evidence_path, find_evidence, without_prediction
from memtrace_otel.attribution.graph_index import STORED_KINDS, GraphIndex, graph_index
from memtrace_otel.attribution.presence import (
    Information,
    asks,
    critical_information,
    salient,
    split_header,
    tokenize,
    topic_of,
    weighted_share,
)
from memtrace_otel.attribution.ranking import embedder
from memtrace_otel.attribution.structural import Suspect, structural_suspects
from memtrace_otel.attribution.survival import (
    Fate,
    held_already,
    keeps,
    removed_on_day,
    said_beside,
    statement_fate,
    statement_loss,
    stating_gold,
    stored_instead,
    unread_by,
    untold_event,
    whole_gold_test,
    wrote_about,
)
from memtrace_otel.semconv import Category, VariableKind, error_type_of_category
from memtrace_otel.text import MONTH_NAMES, sentences

__all__ = ["LineageEngine", "find_evidence"]

_NOT_CONTEXT = frozenset({VariableKind.QUERY})
_EXTRACTION_ROLES: dict[str, int] = {Category.EXTRACTION: 0, Category.INGEST: 1}
_READ_PATH = frozenset({Category.GENERATION, Category.RERANK, Category.RETRIEVAL})
_READ_OPS = frozenset({Category.RERANK, Category.RETRIEVAL})
_FALLBACK_ALTERNATIVES = 4
_LOSS_TYPES = frozenset({ErrorType.UPDATE, ErrorType.DELETION})
_SAYS_SHARE = 0.5
"""Share of the whole gold (by weight, and by how rare its words are) the evidence sentence must say to state
the answer: what a paraphrase of it must keep (``carrying._PARAPHRASE_GOLD_SHARE``)."""
_ANSWER_KEPT_SHARE = 2 / 3
"""Share of the gold words the evidence message said (by the gold's weights) a memory must keep to hold the
answer rather than a fragment of it (:func:`_fragment_written`): a list missing one item of three, a fact
without a detail, still answer; a fact keeping one part of two ("tilly helps Joanna stay focused" of "stuffed
animal dog named Tilly") or half a phrase does not."""
_BEYOND_SHARE = 0.2
"""Share of a statement's (IDF-weighted) words outside the question's for it to say more than the question."""
_ECHO_SHARE = 0.8
"""Share of a failed answer's (IDF-weighted) words beyond the question's that a memory line must hold for the
answer to restate it (:func:`_answered_with`)."""
_ECHO_MIN_WORDS = 2
"""Words beyond the question's a failed answer must say to restate a line rather than the question."""


@dataclass(slots=True)
class Verdict:
    """One candidate root cause, with what supports it."""

    operation: str
    error_type: ErrorType
    why: str
    carrier: str | None = None
    confidence: float = 0.9
    gold_grounded: bool = True
    alternatives: list[str] = field(default_factory=list)
    asked: bool = False
    """The evidence sentence is a question and the verdict an extraction that stored nothing of it: a
    question states no fact for an extractor to keep (the answer to it is the next message's)."""
    elsewhere: bool = False
    """The verdict is an extraction whose statements are all about other things: its message (an
    evidence id names a turn near the one saying the answer) may not have stated the fact."""
    says_whole: bool = False
    """The verdict's evidence message states the whole gold (every word of it, in the sentence stating the
    fact): its fact alone answered the question, whatever became of another evidence message's part."""
    returned: bool = False
    """The verdict blames a search for a unit alive in its store that the answerer's context holds: the
    search returned what the presence test sees carrying the fact, so it is not shown to have missed it
    (the fact may need more than the test sees, or another evidence message's part was what was lost)."""


def _read_side(case: LineageCase, carries: Carrying, asked: frozenset[str] = frozenset(),
               question: str | None = None, told: frozenset[str] = frozenset(),
               stated: Information | None = None) -> Verdict | None:
    """Blame on the query path: the first op whose inputs (or store) carry and outputs do not."""
    index = case.index
    alive = _alive_carriers(case, carries, carries.lineage_stored())
    own_losses = [before for _, before, _ in _losses(case, carries, carries.lineage_stored())]
    if (own := _own_statement_loss(case, carries, asked)) is not None:
        own_losses.append(own[2])
    if alive and own_losses and question:
        alive = _beside_loss(case, carries, question, alive, own_losses)
    if not alive and own_losses and question:
        alive = _no_further(case, question, _alive_carriers(case, carries, carries.stored()), own_losses)
    elif not alive and not own_losses:
        # A unit from elsewhere (a duplicate) holding the fact makes a miss a retrieval error
        # only when nothing on the evidence's own lineage was lost before: the earliest faulty
        # operation wins.
        alive = _alive_carriers(case, carries, carries.stored())
        if alive and (drops := _unexcused_drops(case, carries)):
            # An extraction that stored none of the fact is no such loss when a later saying of it,
            # written by a write that read memory descended from the evidence (a memory system's
            # update decision reads the memories similar to the new fact), was still held at the
            # question: the information was in memory, and a repaired extraction's unit would have
            # met the same search that passed over this one. A unit with no such tie may only share
            # the gold's words ("Rome wasn't built in a day"): the drop stays the first loss, unless
            # the search would have passed over the repaired extraction's fact too (_passed_over).
            alive = [v for v in alive if v in carries.descendants] or (
                _passed_over(case, carries, question, alive, drops) if question else [])
    chain = [op for op in case.read_side() if not index.is_step(op)]
    reached: str | None = None  # a carrier the question's read side wrote, on its way to the answerer
    retrievals = [op for op in chain if index.category(op) == Category.RETRIEVAL]

    def carriers_read(op: str) -> list[str]:
        inputs = [v for v in index.inputs(op) if index.data(v).get("kind") not in _NOT_CONTEXT
                  and index.producer(v) not in case.foreign]
        found = [v for v in inputs if carries(v)]
        if not found and index.category(op) == Category.RETRIEVAL:
            # A retrieval is to blame for what its own store held (the user or filters it
            # searched), not for a unit of another speaker's store that another search read.
            found = [v for v in alive if _same_store(index, op, v, retrievals)]
        return found

    read = {op: carriers_read(op) for op in chain}
    for position, op in enumerate(chain):
        carrier = read[op][0] if read[op] else None
        if carrier is None and op == case.generator:
            carrier = reached
        if carrier is None:
            continue
        # What a retrieval or rerank returned is all it wrote (graphs that link results by value
        # may hand the answerer another op's copy of them); other ops by what reaches the answer.
        outputs = _results(index, op) if index.category(op) in _READ_OPS else [
            v for v in index.written(op) if v in case.answer_slice or v == case.answer]
        kept = next((v for v in outputs if carries(v)), None)
        # What a search step passed on may carry only as another message's memory sharing the gold's
        # words, while it dropped the evidence's own: it lost the fact (_own_dropped).
        if kept is not None and index.category(op) in _READ_OPS and (
                lost := _own_dropped(case, carries, read[op], outputs, told, stated, asked)) is not None:
            return _read_verdict(case, op, lost)
        if kept is not None:
            if index.data(kept).get("kind") not in _NOT_CONTEXT:  # a query says the question, not the fact
                reached = reached or kept
            continue
        if any(set(read[op]) & set(read[later]) for later in chain[position + 1:]
               if index.category(later) in _READ_OPS):
            # The information went around this op: a later retrieval or rerank of the question
            # read the same carrier (an agentic search's sufficiency check, one round of several,
            # each reading the first search's results). The op that read it last and passed none
            # on lost it.
            continue
        if (index.category(op) == Category.RETRIEVAL
                and _reached_otherwise(case, op, carries, told, stated, asked)):
            # Another search of the question handed the answerer a carrier: this one's miss decided nothing.
            continue
        return _read_verdict(case, op, carrier)
    if alive:
        missed = _not_returned(case, alive)
        unit = (missed or alive)[0]
        first = next((op for op in retrievals if _same_store(index, op, unit, retrievals)), None)
        verdict = _read_verdict(case, first or case.generator, unit)
        verdict.returned = not missed
        return verdict
    if carries(case.answer):
        return Verdict(
            case.generator,
            ErrorType.RESPONSE,
            "the answer holds the information, yet failed",
            case.answer,
        )
    return None


def _units_behind(case: LineageCase, variable: str) -> list[str]:
    """The stored units ``variable`` is or stands for: itself, the memory it copies, the records it lists."""
    index = case.index
    unit = index.original(variable) or variable
    producer = index.producer(unit)
    if index.is_stored(unit) and (producer is None or index.category(producer) not in _READ_PATH):
        return [unit]
    return index.referenced_states(variable, case.query_time)


def _own_dropped(case: LineageCase, carries: Carrying, read: list[str], outputs: list[str],
                 told: frozenset[str], stated: Information | None, asked: frozenset[str]) -> str | None:
    """A carrier on an evidence message's lineage that a read-side op (a search or one of its steps) read
    (``read``) and did not pass on (``outputs``), when what it passed on carries the fact only as other
    memories, none stating the whole gold; ``None`` otherwise.

    The presence test sees a memory from elsewhere carrying when it shares enough of the gold's words (half,
    in a paraphrase of the evidence sentence), but a memory of another message sharing some of the answer's
    words may tell another event ("Tim recommends a fantasy novel" for the articles he writes about fantasy
    novels, characters, themes and book recommendations): that it reached the reader shows the words reached
    it, not the fact, and the answer failed on it. The search that had the evidence's own saying and left it
    out lost the fact first (as :func:`_reached_otherwise` counts another search's unit from elsewhere only
    when it states the whole gold). A passed-on memory stating the whole gold (with a word of the question)
    gave the reader the answer: the reader stays to blame.

    Whether the op passed the carrier on is judged by the op's own outputs, not by the answerer's context:
    a retrieval that listed the evidence's episode among its candidates (by its words, or by its id, as
    EverMemOS's ``hybrid_retrieval_results`` lists ids) handed it on, and the rerank after it that
    dropped it is the step that lost it. A carrier the answerer's context holds reached the reader by
    some way: the reader had it.
    """
    index = case.index
    if carries.info.source != "gold" or asks(carries.info.text):
        return None
    says_gold = whole_gold_test(index, stated, carries.info.exact, asked) if stated is not None else None
    if says_gold is not None and any(says_gold(u) for v in outputs if carries(v)
                                     for u in (v, *_units_behind(case, v))):
        return None
    lineage = set(carries.lineage_stored())
    own = [u for v in read for u in _units_behind(case, v)
           if (u in lineage or u in carries.written_from or not told.isdisjoint(index.origin_messages(u)))
           and carries(u)]
    if not own:
        return None
    # Passed on is judged by the op's own outputs (a unit's words in one of them, or its id listed): a search
    # that handed the evidence's unit on in its candidate list did its part when a later step dropped it.
    passed = {index.data(u)["name"] for v in outputs for u in _units_behind(case, v)}
    handed = [index.tokens(v) for v in outputs]
    unread = unread_by(case)
    if any(index.data(u)["name"] in passed or any(index.tokens(u) <= held for held in handed) or not unread(u)
           for u in own):
        return None
    return own[0]


def _reached_otherwise(case: LineageCase, retrieval: str, carries: Carrying, told: frozenset[str],
                       stated: Information | None = None, asked: frozenset[str] = frozenset()) -> bool:
    """Whether another of the question's searches (not one reading what ``retrieval`` wrote) returned, into a
    context the answerer read, a unit carrying the information that was written from an evidence message
    (one of ``told``, or on this evidence's lineage) or that states the whole gold (``stated``, with a word
    of the question ``asked``: :func:`.survival.whole_gold_test`).

    An app that searches several stores for one question (mem0's evaluation searches each speaker) hands the
    reader every search's results. A search that passed over a unit carrying the fact did not decide the
    answer when another search returned the evidence's own saying of it, or a saying of the whole answer:
    the reader had it either way. A unit from elsewhere that the presence test sees carrying only because it
    shares some of the gold's words shows no such thing: it may tell another event.
    """
    index = case.index
    if carries.info.source != "gold" or asks(carries.info.text):
        return False  # a fact the evidence does not state in the gold's words: nothing to have had
    unread = unread_by(case)
    says_gold = whole_gold_test(index, stated, carries.info.exact, asked) if stated is not None else None
    for variable in index.inputs(case.generator):
        producer = index.producer(variable)
        if (producer is None or producer == retrieval or index.data(variable).get("kind") in _NOT_CONTEXT
                or index.category(producer) not in _READ_OPS
                or any(index.producer(v) == retrieval for v in index.inputs(producer))):
            continue
        for unit in index.inputs(producer):
            # The cheap ties first: the presence test may embed the unit.
            if (index.is_stored(unit)
                    and (unit in carries.descendants or not told.isdisjoint(index.origin_messages(unit))
                         or (says_gold is not None and says_gold(unit)))
                    and not unread(unit) and carries(unit)):
                return True
    return False


def _not_returned(case: LineageCase, alive: list[str]) -> list[str]:
    """Of ``alive`` (units carrying the fact at the question), those the answerer's context does not hold
    (a unit whose words are all in a context the answerer read was returned: :func:`.survival.unread_by`)."""
    unread = unread_by(case)
    return [v for v in alive if unread(v)]


def _no_further(case: LineageCase, question: str, alive: list[str], lost: list[str]) -> list[str]:
    """Of ``alive`` (units from elsewhere carrying the fact at the question), those at least as close to
    the question (offline embeddings) as the closest unit the evidence's lineage lost; none without
    the embedding model.

    A loss on the evidence's own lineage comes first (the earliest faulty operation) only if it was
    decisive: had the lost unit stayed, would the question's search have returned it? It passed
    over a copy alive in its store; a lost unit no closer to the question than that copy would
    have been passed over too, so the search, not the loss, decided the answer. A lost unit closer
    to the question than every alive copy is one the search would have found: the loss decided.
    """
    embed, index = case.semantic, case.index
    if embed is None or not alive:
        return []
    texts = [index.text(v) or "" for v in (*lost, *alive)]
    vectors = embed([question, *texts])
    similarity = (vectors[1:] @ vectors[0]).tolist()
    bar = max(similarity[:len(lost)])
    return [v for v, s in zip(alive, similarity[len(lost):], strict=True) if s >= bar]


def _beside_loss(case: LineageCase, carries: Carrying, question: str, alive: list[str],
                 lost: list[str]) -> list[str]:
    """Of ``alive`` (carriers on the evidence's lineage at the question), those written from the evidence
    itself (a version of a unit it wrote), and of the others those at least as close to the question as
    the closest lost unit of ``lost`` (:func:`_no_further`).

    A unit another message's write made after reading the evidence's unit (mem0's update decision reads
    the memories similar to its new fact) is on the evidence's lineage, but says that other message's
    fact with the evidence's words around it ("swap soda and candy for seltzer" beside "still enjoys
    soda and candy"). When the evidence's own unit was overwritten or deleted before the question, the
    loss decided the answer unless the search would have passed over the lost unit too.
    """
    index = case.index
    if not carries.info.gold:
        # No gold word in the message (an inferred answer): what carries it is only loosely told, and
        # a unit with the message's other words around it is as good a saying of it as the lost one.
        return alive
    own = {index.data(v)["name"] for v in carries.written_from if index.is_stored(v)}
    beside = [v for v in alive if index.data(v)["name"] not in own]
    if not beside:
        return alive
    closer = set(_no_further(case, question, beside, lost))
    return [v for v in alive if v not in beside or v in closer]


def _passed_over(case: LineageCase, carries: Carrying, question: str, alive: list[str],
                 drops: list[str]) -> list[str]:
    """Of ``alive`` (units from elsewhere carrying the fact at the question, with no tie to the evidence),
    those at least as close to the question (offline embeddings) as what a repaired extraction would
    have stored: the statements the extractions in ``drops`` wrote from the message (a lossy fact is
    the repaired one less a detail) or, when they wrote none, the sentence stating the fact. None
    without the embedding model.

    An extraction that stored none of the fact is decisive only if the question's search would have
    returned the unit a repaired extraction wrote. It passed over a unit saying the fact that was alive
    in its store; a statement of it no closer to the question than that unit would have been passed
    over too: the search, not the drop, decided the answer. Only for extractors that hand statements on
    to be stored (mem0's facts, which its decision turns into units): an op that stored the message
    itself as its unit (a chunker) dropped it from memory directly, and stays the first fault.
    """
    embed, index = case.semantic, case.index
    if embed is None or not alive or not carries.info.text:
        return []
    handed = [v for op in drops for v in index.written(op) if not index.is_stored(v)]
    if not handed:
        return []
    written = [text for v in handed for text, _ in index.pieces(v)]
    proxies = written or [carries.info.text]
    vectors = embed([question, *proxies, *(index.text(v) or "" for v in alive)])
    similarity = (vectors[1:] @ vectors[0]).tolist()
    bar = max(similarity[:len(proxies)])
    return [v for v, s in zip(alive, similarity[len(proxies):], strict=True) if s >= bar]


def _results(index: GraphIndex, op: str) -> list[str]:
    """What a retrieval or rerank returned: its effect (:meth:`GraphIndex.written`) less what it also read.

    An agentic search writes the candidates it then checks itself (the list a
    sufficiency check reads): a variable an op both writes and reads (the same
    name and content, whichever copy a graph linked by value gives it) is its
    working state, not what it returned. An op that only passed on what it
    read returned that.
    """
    written = index.written(op)
    read = {(index.identity(v), index.data(v).get("hash")) for v in index.inputs(op)}
    return [v for v in written if (index.identity(v), index.data(v).get("hash")) not in read] or written


def _same_store(index: GraphIndex, retrieval: str, unit: str, siblings: list[str]) -> bool:
    """Whether ``retrieval`` searched the store ``unit`` lives in (either naming none counts).

    In a shared store, the question's other retrievals (``siblings``) tell
    scopes apart: a unit in the scope of a sibling, not of this retrieval,
    was another user's memory to this one (two searches of one question over
    one store return different memories only when their filters differ).
    """
    searched, held = index.data(retrieval).get("store_id"), index.store_of(unit)
    if searched and held and searched != held:
        return False
    owner = index.scope(unit)
    if owner is None or owner == index.scope(retrieval):
        return True
    return all(index.scope(other) != owner for other in siblings if other != retrieval)


def _answers(case: LineageCase, op: str) -> bool:
    """Whether ``op`` wrote the answer (its effect, whatever its category: MemBase's is ``evaluation``)."""
    return op == case.generator or any(
        v == case.answer or case.index.data(v).get("kind") == VariableKind.ANSWER
        for v in case.index.written(op)
    )


def _read_verdict(case: LineageCase, op: str, carrier: str) -> Verdict:
    index = case.index
    if _answers(case, op):
        verdict = Verdict(
            op, ErrorType.RESPONSE, f"its context {carrier} held the information", carrier
        )
    else:
        verdict = Verdict(
            op,
            ErrorType.RETRIEVAL,
            f"{carrier} held the information but the retrieved context does not",
            carrier,
        )
    if truncated(index, carrier):
        # Presence was inferred from what the producer read, not seen: the cut-off part of
        # the content might not hold it (a reranker that dropped it looks the same).
        verdict.confidence = 0.6
        verdict.why += " (inferred: its captured content is truncated)"
    return verdict


def _alive_carriers(case: LineageCase, carries: Carrying, pool: list[str]) -> list[str]:
    """Memory variables that carry the information and are current when the question is asked."""
    index = case.index
    found: dict[str, None] = {}
    for variable in pool:
        current = index.state_at(index.data(variable)["name"], case.query_time)
        if current is not None and carries(current):
            found[current] = None
    return list(found)


def _losses(case: LineageCase, carries: Carrying, pool: list[str]) -> list[tuple[str, str, str]]:
    """(op, before, after) for each stored carrier whose next version no longer carries.

    A unit deleted by a marker (MemBase) has no next version: ``after`` is the marker.
    """
    index = case.index
    found = []
    for variable in pool:
        name = index.data(variable)["name"]
        versions = index.versions(name)
        position = versions.index(variable)
        if position + 1 < len(versions):
            after = versions[position + 1]
            producer = index.producer(after)
            if producer is not None and index.order(producer) < case.query_time and not carries(after):
                found.append((producer, variable, after))
                continue
        written, until = index.produced_at(variable), case.query_time
        if position + 1 < len(versions):
            until = min(until, index.produced_at(versions[position + 1]))
        for order, op, marker in index.marker_deletes(name):
            if written < order < until:
                found.append((op, variable, marker))
                break
    return found


def _unexcused_drops(case: LineageCase, carries: Carrying) -> list[str]:
    """Extractions on the evidence's own lineage that stored none of the fact it carried.

    Only when nothing on that lineage was ever stored; a drop is excused (a
    deduplication) when a unit holding the fact was current in the store
    at the time.
    """
    if carries.structural or carries.lineage_stored():
        return []
    index = case.index
    elsewhere = carries.stored()
    found = []
    for op in carries.forward()[1]:
        if index.category(op) not in _EXTRACTION_ROLES:
            continue
        when = index.order(op)
        current = (index.state_at(index.data(v)["name"], when) for v in elsewhere)
        if not any(v is not None and carries(v) for v in current):
            found.append(op)
    return found


def _loss_type(index: GraphIndex, op: str, after: str) -> ErrorType:
    """The error type of a loss by what ``op`` did to the unit: deleted it, or rewrote it.

    A deletion marker is a deletion whatever the category (MemBase files its
    deletions under ``update``). A tombstone is one too, except from an
    update-role op (a window trim bounds the window: an update of the store).
    A new version without the information is an update error; the category
    decides only for a deletion-role op that wrote an emptied version.
    """
    category = index.category(op)
    if index.is_deletion_marker(after):
        return ErrorType.DELETION
    if index.data(after).get("deleted"):
        return ErrorType.UPDATE if category == Category.UPDATE else ErrorType.DELETION
    if category in _EXTRACTION_ROLES and _raw(index, op, after):
        # The unit still held the input as ingested (EverMemOS's memcell keeps the messages until
        # its episode is written): the op that rewrote it first made it memory, an extraction.
        return ErrorType.EXTRACTION
    return ErrorType.DELETION if category == Category.DELETION else ErrorType.UPDATE


def _raw(index: GraphIndex, op: str, after: str) -> bool:
    """Whether the versions before ``after`` were written by ingestion only (or by ``op`` itself,
    the steps of one extraction): the unit held its input as ingested, not yet a memory."""
    versions = index.versions(index.data(after)["name"])
    earlier = versions[:versions.index(after)] if after in versions else []
    writers = [index.producer(v) for v in earlier]
    return bool(earlier) and all(w is None or w == op or index.category(w) == Category.INGEST
                                 for w in writers) and any(w is not None and w != op for w in writers)


def _drop_type(case: LineageCase, op: str, carries: Carrying) -> tuple[ErrorType, str]:
    """The error type of an op that read the information and wrote nothing carrying it, by its effect.

    It rewrote a unit into a new statement about the same fact without it (an
    update, or a lossy merge into an older memory): UpdateError; it deleted
    one: DeletionError; else it wrote no unit with it: ExtractionError (an
    append that left a window as it was, what it held about the fact included).
    An op that read the evidence message itself and merged it lossily into a
    unit was the first to put the message into memory (a long-context window
    folding in each message, whatever its category): what it failed at is
    extraction.
    """
    index = case.index
    written = index.written(op)
    raw = carries.evidence in index.inputs(op)
    for variable in written:
        if not raw and index.is_stored(variable) and not index.data(variable).get("deleted"):
            versions = index.versions(index.data(variable)["name"])
            position = versions.index(variable) if variable in versions else 0
            if position and carries.about(variable, besides=versions[position - 1]):
                return ErrorType.UPDATE, f"it rewrote {variable} without the information"
    if any(index.is_deletion_marker(v) or index.data(v).get("deleted") for v in written) and not any(
            index.is_stored(v) and not index.data(v).get("deleted") for v in written):
        return ErrorType.DELETION, "it deleted what it read instead of storing the information"
    return ErrorType.EXTRACTION, "wrote nothing that holds the information"


def _write_side(case: LineageCase, carries: Carrying, asked: frozenset[str] = frozenset(),
                stated: Information | None = None, answered: frozenset[str] = frozenset(),
                topic: frozenset[str] = frozenset(), *, misled: bool = False) -> Verdict | None:
    """Blame before the question: the last loss of a stored carrier, or the extraction that never
    stored one (``answered``: the failed answer's words; ``topic``: what the question asks about;
    ``misled``: the reader answered with the context line best matching the question, which lacks the
    gold: :func:`_answered_best_match`)."""
    index = case.index
    losses = _losses(case, carries, carries.lineage_stored())
    if not losses and (own := _own_statement_loss(case, carries, asked)) is not None:
        # Nothing the presence test sees on the evidence's lineage was lost, but what its extraction
        # wrote about the fact was: that loss is on the evidence's own lineage, a unit from elsewhere
        # is not (the same preference as for carriers).
        return _statement_verdict(index, own)
    losses = losses or _losses(case, carries, carries.stored())
    if losses:
        losses.sort(key=lambda item: index.order(item[0]))
        op, before, after = losses[-1]
        kind = _loss_type(index, op, after)
        if kind is ErrorType.EXTRACTION and (missed := _raw_rewrite_missed(case, carries, op, asked, stated)):
            return missed
        if kind in _LOSS_TYPES and (fragment := _fragment_written(case, carries, stated, op, before)):
            # The removed unit held a fragment of the answer, the extraction's own: it lost the rest first.
            return fragment
        deleted = index.data(after).get("deleted") or index.is_deletion_marker(after)
        verb = "deleted" if deleted else "overwrote"
        why = f"it {verb} {before}, the last memory unit holding the information"
        return Verdict(op, kind, why, before, alternatives=[item[0] for item in losses[:-1]])
    if carries.stored():
        # Another unit holds the fact: only an extraction that dropped it while none did yet
        # (not a deduplication) is faulty, and it comes before any retrieval.
        drops = _unexcused_drops(case, carries)
    else:
        _, drops = carries.forward()
    # Extraction is a role: among ops that read the fact and wrote none of it, those whose job is
    # to carry content into memory come first (a boundary detector writes no content by design).
    candidates = sorted(
        drops, key=lambda op: (_EXTRACTION_ROLES.get(index.category(op), 2), index.order(op))
    )
    if not candidates:
        return None
    read = _last_carrier_read(index, candidates[0], carries)
    kind, effect = _drop_type(case, candidates[0], carries)
    fate = statement_fate(case, carries, candidates[0], asked=asked) if kind is ErrorType.EXTRACTION else None
    if fate is not None and fate.loss is not None:
        # What the extraction wrote about the fact reached memory and a later write removed it:
        # that write, not the extraction, decided that no unit held it at the question.
        verdict = _statement_verdict(index, (candidates[0], *fate.loss))
        verdict.alternatives = candidates
        return verdict
    if fate is not None and (missed := _missed(case, fate, stated, carries.evidence, asked, answered,
                                                topic, misled=misled)) is not None:
        missed.alternatives = candidates
        return missed
    said = _says_answer(index, carries.info, stated)
    if (fate is None and kind is ErrorType.EXTRACTION and index.category(candidates[0]) in _EXTRACTION_ROLES
            and (unread := _unread(case, stored_instead(case, carries, candidates[0], asked=asked,
                                                        gold=stated, said=said))) is not None):
        unread.alternatives = candidates
        return unread
    if (fate is None and kind is ErrorType.EXTRACTION and index.category(candidates[0]) in _EXTRACTION_ROLES
            and (held := _unread(case, held_already(case, carries, candidates[0], asked=asked, gold=stated),
                                 "the extraction read it and wrote nothing new")) is not None):
        held.alternatives = candidates
        return held
    why = f"it read {read} but {effect.removeprefix('it ')}, and " + (
        "no memory unit held it at the time" if carries.stored() else "no memory unit ever did"
    )
    return Verdict(candidates[0], kind, why, read, alternatives=candidates[1:])


def _extractions_before(index: GraphIndex, evidence: str, moment: int) -> Iterator[str]:
    """The extraction (or ingest) operations that read ``evidence`` before ``moment`` (an execution order), in
    the order ``index.readers`` gives them; internal steps excluded."""
    return (op for op in index.readers(evidence)
            if index.category(op) in _EXTRACTION_ROLES and not index.is_step(op) and index.order(op) < moment)


def _fragment_written(case: LineageCase, carries: Carrying, gold: Information | None, remover: str,
                      before: str) -> Verdict | None:
    """The evidence's extraction, when the unit ``before`` that ``remover`` (an update or a deletion) removed
    kept under :data:`_ANSWER_KEPT_SHARE` of the gold words the evidence message said, and so did every line
    that extraction wrote; ``None`` otherwise (the removal decided).

    The presence test's fact is the evidence sentence's, and a fragment of it carries ("Joanna mentioned that
    tilly helps Joanna stay focused" for "stuffed animal dog named Tilly"). Removing such a unit lost only the
    fragment: its repair restores a unit from which the answer still does not come, while the extraction that
    wrote the fact without the rest of what its message said lost the answer first (a repaired one stores
    it whole). When the extraction wrote the answer whole and a later merge cut it, the loss is not the
    extraction's: nothing changes.
    """
    if gold is None or not gold.gold:
        return None
    index = case.index
    said = {t: gold.gold.get(t, 1.0) for t in carries.info.said}
    if not said or weighted_share(said, index.tokens(before)) >= _ANSWER_KEPT_SHARE:
        return None
    for op in _extractions_before(index, carries.evidence, index.order(remover)):
        lines = [line for v in index.written(op) for line in index.lines(v)]
        if not lines or any(weighted_share(said, line) >= _ANSWER_KEPT_SHARE for line in lines):
            return None
        return Verdict(op, ErrorType.EXTRACTION, f"it read {carries.evidence} and wrote its fact with under "
                       f"{_ANSWER_KEPT_SHARE:.0%} of the answer the message said; {before}, which "
                       f"{index.data(remover).get('name')} later removed, held only that fragment",
                       carries.evidence, alternatives=[remover])
    return None


def _raw_rewrite_missed(case: LineageCase, carries: Carrying, op: str, asked: frozenset[str],
                        stated: Information | None) -> Verdict | None:
    """The verdict on an extraction that rewrote a unit holding its input as ingested (an EverMemOS
    memcell's messages) into a memory the presence test does not see carrying the fact, when what
    it wrote about the fact is still stored (:func:`_missed`); ``None`` to blame the extraction.

    Such an extraction is an extraction like any other: the messages it dropped from the unit
    were its input, not a memory, and it is judged by the statement it wrote, followed into
    memory (its own unit included) as an extractor's facts are.
    """
    if carries.structural:
        return None
    fate = statement_fate(case, carries, op, asked=asked, own=True)
    if fate is None or fate.loss is not None:
        return None
    # Without the question: an episode's statement was written from a whole memcell (a session's
    # messages), so words of it beyond the question may be any message's, not an account of this one's
    # fact (:func:`_partly_answers` asks that of facts extracted from the evidence message).
    missed = _missed(case, fate, stated, carries.evidence)
    if missed is not None:
        missed.alternatives = [op]
    return missed


def _missed(case: LineageCase, fate: Fate, gold: Information | None, evidence: str,
            asked: frozenset[str] = frozenset(), answered: frozenset[str] = frozenset(),
            topic: frozenset[str] = frozenset(), *, misled: bool = False) -> Verdict | None:
    """The question's search that did not return a unit still stating what the evidence's extraction
    wrote about the fact (alive in its store when the question was asked), if the answer's context
    holds no such statement; ``None`` when the context holds it or no search of its store is known.

    The extraction stored its statement and nothing removed it: the information was in memory,
    and the question's retrieval of that store passed on none of it. When the context holds the
    statement, the reader is to blame if the statement has the whole gold, or part of it (with much of
    the sentence stating it, or, given the question's words ``asked``, with more than the question says:
    :func:`_partly_answers`); a statement without any of the gold is left open (a lossy fact), and so is
    one with part of it that the failed answer (its words ``answered``) restates (:func:`_answered_with`), or
    one that left out gold words its message's sentence said while the answer restates another line holding
    as much of the question (:func:`_answered_instead`).
    A statement lacking some of the gold and keeping none of what the question asks about (``topic``: its
    words beyond names and dates), written from a message stating the answer (:func:`_said_in`), is not
    blamed on a search that passed over it either: the question had nothing to find it by.
    """
    index = case.index
    if (not salient(fate.info, index.message_text(evidence)) <= fate.statement
            or not fate.info.tells_event(fate.statement)):
        # It lost a name, number or month of the gold its message said: no paraphrase says those in
        # other words, so the statement lost the answer (the extraction's own fault). So did one that
        # kept a date but not the event's words memory kept nowhere else (`untold_event`).
        return None
    contexts = _answerer_context(case)
    held = next((v for v in contexts if keeps(index, v, fate.statement, fate.info)), None)
    if held is not None and misled:
        # The reader answered with a line matching the question better than the statement did, and
        # lacking the gold: the statement, whatever of the gold it kept, did not read as the answer to
        # the question (the extraction wrote it without what tied it to what was asked).
        return None
    if held is not None:
        if gold is not None and gold.gold and gold.gold.keys() | gold.exact <= fate.statement:
            # The statement says every word of the gold and the reader had it: a wrong answer from a
            # context that held the answer.
            return Verdict(case.generator, ErrorType.RESPONSE, f"its context {held} held what the extraction "
                           "wrote about the fact, the whole gold with it", held, confidence=0.7)
        if _answered_with(index, answered, fate.statement, asked):
            # The reader answered with the statement itself: it read the extraction's account of the fact
            # and said what it says, and a judge found that short of the gold. The part of the answer the
            # statement lacks was lost when it was written, not when it was read: the extraction's fault.
            return None
        if _answered_instead(index, contexts, answered, fate, asked):
            # The reader answered with another line that matches the question as well as the statement does:
            # it looked for the answer and the statement did not read as one, for the extraction had left
            # out gold words its message's sentence said. The extraction lost what the reader needed.
            return None
        if fate.info.related(fate.statement) and weighted_share(fate.info.gold, fate.statement) > 0:
            # The statement is this message's fact (much of the sentence stating it) and keeps part of
            # the gold: the reader had the extraction's account of the answer and answered wrong.
            return Verdict(case.generator, ErrorType.RESPONSE, f"its context {held} held what the extraction "
                           "wrote about the fact, part of the gold with it", held, confidence=0.6)
        if gold is not None and asked and _partly_answers(index, fate.statement, gold, asked):
            # The statement is about another sentence of the message (the fact in the extractor's words), but
            # it keeps some of the answer and tells more than the question does: the reader had part of the
            # answer with what surrounds it, and answered wrong.
            return Verdict(case.generator, ErrorType.RESPONSE, f"its context {held} held what the extraction "
                           "wrote about the fact, part of the answer with it", held, confidence=0.5)
        return None  # the reader had it, but it may not say all the answer needs (a lossy fact): left open
    whole = gold is not None and bool(gold.gold) and gold.gold.keys() | gold.exact <= fate.statement
    if topic and not _mentions(fate.statement, topic) and not whole and _said_in(index, evidence, gold):
        # The statement lacks some of the gold and keeps none of what the question asks about ("Melanie
        # continued expressing herself through reading and painting" for "What does Melanie do to keep
        # herself busy during her pottery break?"): a search for the question had nothing to find it by, nor
        # a reader to tie it to the question. The extraction that wrote the fact without what it was about
        # lost it for the question. A statement saying the whole gold (a date) answers wherever it is found;
        # a message not saying the answer may be the turn beside the one that does (an evidence id's slip),
        # whose unit the search passed over.
        return None
    retrievals = _question_searches(case)
    for unit in fate.alive:
        searches = [op for op in retrievals if _same_store(index, op, unit, retrievals)]
        search = _returning_step(case, searches, retrievals) if searches else None
        if search is not None:
            return Verdict(search, ErrorType.RETRIEVAL, f"{unit} still held what the extraction wrote about "
                           "the fact, but the retrieved context does not", unit, confidence=0.7)
    return None


def _answered_with(index: GraphIndex, answered: frozenset[str], statement: frozenset[str],
                   asked: frozenset[str]) -> bool:
    """Whether a failed answer (its words ``answered``) restates ``statement``: it says something beyond the
    question's words (``asked``), at least :data:`_ECHO_MIN_WORDS` words, and :data:`_ECHO_SHARE` of their IDF
    weight is the statement's.

    A reader that repeats a memory line answered from it ("Gina chose furniture and decor for her store that
    match her style" for a line saying that and more); one that says "I don't know", the question back, or
    another line's words did not.

    >>> from memtrace_otel.attribution.graph_index import GraphIndex
    >>> import networkx as nx
    >>> index, asked = GraphIndex(nx.DiGraph()), frozenset({"gina", "want", "customer", "feel", "store"})
    >>> statement = frozenset({"gina", "chose", "furniture", "decor", "store", "match", "style", "customer",
    ...                        "feel", "comfortable"})
    >>> _answered_with(index, frozenset({"gina", "chose", "furniture", "decor", "store", "match", "style"}),
    ...                statement, asked)
    True
    >>> _answered_with(index, frozenset({"know"}), statement, asked)
    False
    >>> _answered_with(index, frozenset({"gina", "launch", "ad", "campaign", "store"}), statement, asked)
    False
    """
    own = [t for t in answered if t not in asked]
    total = math.fsum(index.idf(t) for t in own)
    return (len(own) >= _ECHO_MIN_WORDS and total > 0
            and math.fsum(index.idf(t) for t in own if t in statement) / total >= _ECHO_SHARE)


def _answered_instead(index: GraphIndex, contexts: list[str], answered: frozenset[str], fate: Fate,
                      asked: frozenset[str]) -> bool:
    """Whether the statement (``fate``) lacks some of the gold words its message's sentence said, and the
    failed answer (its words ``answered``) restates another line of the answerer's ``contexts`` that holds
    at least as much of the question (``asked``, by IDF weight) as the statement does.

    A reader without the answer answers from the line that best matches the question ("Nate has turtles as
    pets that always cheer him up" for "Why does Nate like turtles as pets?", beside a statement that kept
    "slow" of "their slow pace and calming nature"). That reader did its job with what memory said: the
    statement did not read as the answer because the extraction left out what its message said of it. A
    reader that ignored the statement for a line matching the question less, said "I don't know", or said
    something no line says, did not: it had part of the answer and gave none of it (a reader's mistake).
    """
    if fate.info.gold.keys() <= fate.statement:
        return False

    def asked_weight(tokens: frozenset[str]) -> float:
        return math.fsum(index.idf(t) for t in tokens & asked)

    bar = asked_weight(fate.statement)
    return any(_answered_with(index, answered, line, asked) and asked_weight(line) >= bar
               for v in contexts for line in index.lines(v) if not fate.statement <= line)


def _said_in(index: GraphIndex, message: str, gold: Information | None) -> bool:
    """Whether ``message``'s own words (its header's time and speaker aside) say half the gold, by weight
    and by how rare its words are: the message stated the answer.

    The header's date is when it was said, which every message of the session holds: a date gold's month and
    year in it say nothing of the event asked.
    """
    if gold is None or not gold.gold:
        return False
    said = tokenize(split_header(index.message_text(message) or "")[1])
    rare = {t: w * index.idf(t) for t, w in gold.gold.items()}
    return weighted_share(gold.gold, said) >= _SAYS_SHARE and weighted_share(rare, said) >= _SAYS_SHARE


def _mentions(statement: frozenset[str], topic: frozenset[str]) -> bool:
    """Whether ``statement`` says one of the ``topic`` words, a final "e" aside: the suffix stripper leaves
    it on a bare word and takes it with "-ing" or "-ed" ("realize" against "realiz" from "realizing").

    >>> _mentions(frozenset({"melani", "realiz", "self", "care"}), frozenset({"realize", "chariti", "race"}))
    True
    >>> _mentions(frozenset({"melani", "read", "paint"}), frozenset({"keep", "busy", "potteri", "break"}))
    False
    """
    said = {t.removesuffix("e") for t in statement}
    return any(t.removesuffix("e") in said for t in topic)


def _partly_answers(index: GraphIndex, statement: frozenset[str], gold: Information,
                    asked: frozenset[str]) -> bool:
    """Whether ``statement`` holds some of the gold's words, dates aside, and says more than the question
    (``asked``): :data:`_BEYOND_SHARE` of its IDF weight in words outside the question, numbers and months
    aside.

    A fact a reader had that keeps part of the answer ("the importance of self-care" for "self-care is
    important") gave it something to answer from; one holding only the date it was said on (every fact of
    that session holds it) or only the question's own words did not.

    >>> from memtrace_otel.attribution.graph_index import GraphIndex
    >>> import networkx as nx
    >>> index, asked = GraphIndex(nx.DiGraph()), frozenset({"melanie", "realiz", "charity", "race"})
    >>> gold = Information(gold={"self": 1.0, "care": 1.0, "important": 1.0})
    >>> _partly_answers(index, frozenset({"melanie", "realiz", "importance", "self", "care"}), gold, asked)
    True
    >>> _partly_answers(index, frozenset({"melanie", "ran", "charity", "race", "25", "may"}), gold, asked)
    False
    """
    answer = {t: w for t, w in gold.gold.items() if not t.isdigit() and t not in MONTH_NAMES}
    if not answer or weighted_share(answer, statement) <= 0:
        return False
    said = [t for t in statement if not t.isdigit() and t not in MONTH_NAMES]
    total = math.fsum(index.idf(t) for t in said)
    return bool(total) and math.fsum(index.idf(t) for t in said if t not in asked) / total >= _BEYOND_SHARE


def _earlier_miss(case: LineageCase, verdict: Verdict, units: list[str], *, later: bool = False
                  ) -> Verdict | None:
    """The question's earliest search before ``verdict``'s whose store held one of ``units`` (alive, not
    returned, stating the whole gold: :func:`.survival.stating_gold`); ``None`` when none did. With
    ``later``, the searches after ``verdict``'s count too.

    A question searched several stores (one per user, as mem0 apps search each speaker), and the
    verdict blames one that passed over a unit carrying the fact. An earlier search of another store
    that passed over a unit saying the whole answer failed first: the earliest faulty operation is the
    root cause. Searches of the verdict's own store are left to the read-side walk (rounds of one search
    read the same memory).

    ``later``: the verdict's carrier holds none of the gold, written from a message that said none of it
    (an evidence id naming the other speaker's turn beside the answer: "Yeah, it's been great for me"
    for "What food item did Maria drop off?"). That carrier is the message's sentence, which the presence
    test follows when the gold is not in it; returned, it would not have given the reader the answer. The
    search of the store holding a unit that states it ("Maria is off to bake some cakes") is the one
    whose miss kept the answer from the reader, whenever it ran.
    """
    index = case.index
    retrievals = _question_searches(case)
    own = set(_search_steps(index, [verdict.operation], retrievals)) if later else set()
    for search in retrievals:
        if later and (search in own or verdict.operation in _search_steps(index, [search], retrievals)):
            continue  # the verdict's own search (or a step of it)
        if (not later and (index.order(search) >= index.order(verdict.operation)
                           or verdict.operation in _search_steps(index, [search], retrievals))):
            break  # the verdict's own search (or a step of it) and what came after
        if verdict.carrier is not None and _same_store(index, search, verdict.carrier, retrievals):
            continue  # a search of the same store (an earlier round, another index of it) is not another's
        unit = next((u for u in units if _same_store(index, search, u, retrievals)), None)
        if unit is not None:
            return Verdict(_returning_step(case, [search], retrievals), ErrorType.RETRIEVAL,
                           f"{unit} said the whole answer but the retrieved context does not", unit,
                           confidence=min(verdict.confidence, 0.7))
    return None


def _question_searches(case: LineageCase) -> list[str]:
    """The retrievals on the answer's path at or after the question, steps excluded, in execution order."""
    index = case.index
    return [op for op in case.read_side() if index.category(op) == Category.RETRIEVAL
            and not index.is_step(op)]


def _returning_step(case: LineageCase, searches: list[str], retrievals: list[str]) -> str:
    """Of ``searches`` (non-empty) and their later steps, the one that returned memory or the answerer's
    context; the first search when none did.

    A search in several steps (candidate lists, a sufficiency check, a rerank) returns memory at one
    of them: the step that returned units, or the context the answerer read, left a unit out, not the
    one listing candidates.
    """
    index = case.index
    read = set(index.inputs(case.generator))
    return next((op for op in _search_steps(index, searches, retrievals)
                 if any(index.data(v).get("kind") in STORED_KINDS or v in read for v in _results(index, op))),
                searches[0])


def _search_steps(index: GraphIndex, searches: list[str], retrievals: list[str]) -> list[str]:
    """``searches`` and the later steps of them among ``retrievals`` (those reading what a step wrote,
    not memory: a rerank of a search's candidate list), in execution order."""
    steps = set(searches)
    for op in retrievals:
        if op not in steps and any(index.producer(v) in steps for v in index.inputs(op)
                                   if index.data(v).get("kind") not in STORED_KINDS):
            steps.add(op)
    return [op for op in retrievals if op in steps]


def _unread(case: LineageCase, units: list[str], because: str = "the extraction wrote about other things"
            ) -> Verdict | None:
    """The question's earliest search whose store held one of ``units`` (alive, not returned: what memory
    had for the fact while the extraction is not shown at fault -- it wrote about other things,
    :func:`.survival.stored_instead`, or found the fact held already, :func:`.survival.held_already`);
    ``None`` when there are none or no search of their stores is known."""
    index = case.index
    retrievals = _question_searches(case)
    for search in retrievals:
        unit = next((u for u in units if _same_store(index, search, u, retrievals)), None)
        if unit is not None:
            return Verdict(_returning_step(case, [search], retrievals), ErrorType.RETRIEVAL,
                           f"{unit} held what memory had of the fact ({because}), but the retrieved "
                           "context does not", unit, confidence=0.6)
    return None


def _own_statement_loss(case: LineageCase, carries: Carrying, asked: frozenset[str]
                        ) -> tuple[str, str, str, str] | None:
    """``(extraction, remover, before, after)``: the last removal, before the question, of what an extraction
    of the evidence wrote about the fact (:func:`.survival.statement_loss`); ``None`` if none was removed."""
    index = case.index
    if carries.structural:
        return None
    found = [(op, *loss) for op in _extractions_before(index, carries.evidence, case.query_time)
             if (loss := statement_loss(case, carries, op, asked=asked)) is not None]
    return max(found, key=lambda item: (index.order(item[1]), item[1])) if found else None


def _statement_verdict(index: GraphIndex, loss: tuple[str, str, str, str]) -> Verdict:
    extraction, op, before, after = loss
    verb = "deleted" if index.data(after).get("deleted") or index.is_deletion_marker(after) else "overwrote"
    why = (f"it {verb} {before}, the last memory unit holding what {index.data(extraction).get('name')} "
           "wrote about the fact")
    return Verdict(op, _loss_type(index, op, after), why, before)


def _last_carrier_read(index: GraphIndex, op: str, carries: Carrying) -> str:
    return next((v for v in index.inputs(op) if carries(v)), carries.evidence)


def _trace(case: LineageCase, failure: FailureCase, evidence: str, told: frozenset[str] = frozenset()
           ) -> Verdict | None:
    """The verdict for one evidence message's information (``told``: the failure's evidence messages)."""
    index = case.index
    content = index.text(evidence)
    if content and not failure.gold:
        content = without_prediction(content, failure.question, failure.prediction)
    info = critical_information(
        failure.gold,
        failure.question,
        content if content else None,
        idf=index.idf,
        specific=index.specific,
        speaker=index.speaker(evidence),
    )
    topic = topic_of(failure.question)
    info = replace(info, event=untold_event(case, info, evidence, topic))
    structural = case.structural or not info
    stated = critical_information(failure.gold, failure.question) if failure.gold else None
    carries = Carrying(case, evidence, info, structural=structural, stated=stated)
    asked = tokenize(failure.question)
    answered = tokenize(failure.prediction)
    verdict = _read_side(case, carries, asked, failure.question, told, stated)
    if verdict is not None and verdict.returned and not structural:
        verdict = _gave_back(case, carries, verdict, asked, answered) or verdict
    reader_blamed = (verdict is not None and verdict.error_type is ErrorType.RESPONSE
                     and verdict.operation == case.generator)
    # How the reader answered matters only to a reader's verdict or to none (the write side's, below): a
    # search's or a removal's verdict skips the pass over the answerer's context.
    misled = (verdict is None or reader_blamed) and _answered_best_match(case, stated, asked, answered)
    if misled and reader_blamed:
        # The reader answered with the context line most about the question, and that line lacks the
        # answer: it did what a reader does, and the fact it was to find was not stated where a reader
        # looks. The extraction that wrote it so (lossy, or without what ties it to the question) failed
        # first; a later removal or a search is no account of how the fact read, and stays unblamed here.
        written = _write_side(case, carries, asked, stated, answered, topic, misled=True)
        if written is not None and written.error_type is ErrorType.EXTRACTION:
            verdict = written
    if verdict is not None and _untied_context(case, carries, verdict):
        # The answerer's context holds the gold's words, but no unit written from the evidence was in
        # memory at the question: they came from another message (one saying something like it, or
        # sharing common words). The reader never had this message's fact; the write that kept none
        # of it is the first loss, and a repaired one would have given the reader the fact.
        written = _write_side(case, carries, asked, stated, answered, topic)
        if written is not None and written.error_type in _LOSS_TYPES | {ErrorType.EXTRACTION}:
            verdict = written
    if verdict is not None and stated is not None and not structural:
        verdict = _narrow_carrier(case, carries, verdict, stated, topic) or verdict
    verdict = verdict or _write_side(case, carries, asked, stated, answered, topic, misled=misled)
    if verdict is None:
        return None
    if stated is not None and not structural:
        verdict = _removed_beside(case, carries, verdict, stated, asked) or verdict
        verdict = _passed_beside(case, carries, verdict, stated, asked) or verdict
    if verdict.error_type is ErrorType.RETRIEVAL and stated is not None and not structural:
        # A carrier of a message that said none of the gold, by a speaker the question does not ask about (the
        # other speaker's turn beside the answer), is its sentence's fact, not the answer: a search after it
        # that passed over a unit stating the answer failed as much (_earlier_miss, ``later``).
        carrier = verdict.carrier
        unsaid = (not info.said and tokenize(index.speaker(evidence)).isdisjoint(asked)
                  and (carrier is None or stated.gold.keys().isdisjoint(index.tokens(carrier))))
        # That sentence said no date either: a unit stating a date gold as its sentence told it (not the day
        # its message was said) is one stating the answer (``dated``).
        verdict = _earlier_miss(case, verdict, stating_gold(case, stated, info.exact, asked, dated=unsaid),
                                later=unsaid) or verdict
    # A sentence that asks states nothing: the gold's words in it ("what's been up since we talked?" for
    # "since this one went badly") are the asker's, not the answer said.
    verdict.gold_grounded = info.source == "gold" and not structural and not asks(info.text)
    verdict.says_whole = (verdict.gold_grounded and stated is not None and bool(stated.gold)
                          and stated.gold.keys() <= info.gold.keys())
    verdict.asked = verdict.error_type is ErrorType.EXTRACTION and asks(info.text)
    verdict.elsewhere = (verdict.error_type is ErrorType.EXTRACTION and not structural
                         and index.category(verdict.operation) in _EXTRACTION_ROLES
                         and not _says_answer(index, info, stated)
                         and wrote_about(case, carries, verdict.operation, asked=asked) is False)
    if structural:
        verdict.confidence = 0.35
    elif info.source != "gold":
        verdict.confidence = min(verdict.confidence, 0.7)
    return verdict


def _gave_back(case: LineageCase, carries: Carrying, verdict: Verdict, asked: frozenset[str],
               answered: frozenset[str]) -> Verdict | None:
    """The extraction that wrote ``verdict``'s carrier from the evidence, when the verdict blames a search for
    a unit the answerer's context held (``returned``), the unit lacks gold words its message's sentence said,
    and the failed answer restates it (:func:`_answered_with`); ``None`` otherwise.

    The reader was given the unit and gave it back ("Joanna creates visuals of her characters to help bring
    them alive" for "... alive in her head so she can write better"), and a judge found that short of the
    gold: the unit, which the presence test took for a carrier by the words it kept, did not hold the answer.
    Nothing on the read side lost what it said (the search returned it, the reader repeated it); the
    extraction that wrote it from the message without the rest did. A unit holding every gold word its
    message's sentence said is left to the search: the answer may be short of another message's part (a
    list gold), which a search passed over.
    """
    carrier, index = verdict.carrier, case.index
    if (carrier is None or carrier not in carries.written_from
            or carries.info.gold.keys() <= index.tokens(carrier)
            or not _answered_with(index, answered, index.tokens(carrier), asked)):
        return None
    op = next(_extractions_before(index, carries.evidence, index.produced_at(carrier)), None)
    if op is None:
        return None
    return Verdict(op, ErrorType.EXTRACTION, f"the failed answer gives back {carrier}, which it wrote from "
                   f"{carries.evidence}: the fact it stored was short of the answer", carrier, confidence=0.6)


def _narrow_carrier(case: LineageCase, carries: Carrying, verdict: Verdict, gold: Information,
                    topic: frozenset[str]) -> Verdict | None:
    """The evidence's extraction, when ``verdict`` blames the read side (a search that passed over a carrier,
    a reader whose context held one) while the evidence message said the answer in another sentence, no line
    of the carrier holds half of what the message said of the gold (:func:`_states_said`), and that
    extraction kept none of it; ``None`` otherwise.

    The presence test's fact is the evidence sentence's ("Yesterday I went for a morning jog for the first
    time", holding "time" of "spending time with loved ones"): a unit need not hold gold words said elsewhere
    in the message to carry it. But when another sentence of the message stated the answer ("And in the
    evenings, I spend time with loved ones") and the extraction kept none of it, what the search passed over
    or the reader had was a fragment the answer could not come from: had the search returned it, or the
    reader read it better, the answer would still have failed. The extraction lost the answer first. It kept
    the answer if it wrote every gold word the message said (a store of the message's sentences, one a line)
    or a line stating half of them about what the question asks (``topic``): mem0 dates every fact by its
    message, so a fact of that day about something else holds a date gold's year.
    """
    if verdict.error_type not in (ErrorType.RETRIEVAL, ErrorType.RESPONSE) or verdict.carrier is None:
        return None
    index = case.index
    info = carries.info
    # The message's own words (its relative times resolved, as the presence test reads it): its header's date
    # is when it was said, not part of what it said.
    body = split_header(index.text(carries.evidence) or "")[1]
    said = info.said & tokenize(body)
    # The message said the answer beside the sentence: another of its sentences, not a question, holds half
    # the gold with gold words that sentence lacks (not a word or two a long gold shares with the message).
    if not any(weighted_share(gold.gold, words) >= _SAYS_SHARE and (words & said) - info.gold.keys()
               for sentence in sentences(body) if sentence != info.text and not asks(sentence)
               for words in [tokenize(sentence)]):
        return None
    lines = [line for line in index.lines(verdict.carrier) if info.gold.keys() <= line]
    if any(_states_said(gold, said, line) for line in lines or index.lines(verdict.carrier)):
        return None
    for op in _extractions_before(index, carries.evidence, case.query_time):
        lines = [line for v in index.written(op) for line in index.lines(v)]
        if not said <= frozenset().union(*lines) and not any(
                _states_said(gold, said, line) and (not topic or _mentions(line, topic)) for line in lines):
            return Verdict(op, ErrorType.EXTRACTION, f"it read {carries.evidence}, whose message said the "
                           f"answer beside the sentence {verdict.carrier} kept, and wrote no line stating it",
                           carries.evidence, alternatives=[verdict.operation])
    return None


def _states_said(gold: Information, said: frozenset[str], tokens: frozenset[str]) -> bool:
    """Whether ``tokens`` hold half the gold words the evidence message said (``said``), by the gold's
    weights (:data:`_SAYS_SHARE`, the share a sentence must say to state the answer)."""
    return weighted_share({t: gold.gold.get(t, 1.0) for t in said}, tokens) >= _SAYS_SHARE


def _removed_beside(case: LineageCase, carries: Carrying, verdict: Verdict, gold: Information,
                    asked: frozenset[str]) -> Verdict | None:
    """The write that later removed a unit of the evidence's day stating the whole gold with a word of the
    question (:func:`.survival.removed_on_day`), when ``verdict`` blames a loss of the evidence's own fact (an
    extraction that dropped it, a removal of its unit); ``None`` when no such write came after it.

    An evidence id names one turn, and the answer is often said in the turn beside it (the other speaker's
    lead-in or reply, "you look so happy when you dance!"). While a unit of that turn stated the answer,
    memory held it: the named turn's loss decided nothing, and a repaired one would have met the same later
    write. That write, the last removal of the answer from memory, did.
    """
    if verdict.error_type not in _LOSS_TYPES | {ErrorType.EXTRACTION}:
        return None
    index = case.index
    loss = removed_on_day(case, gold, carries.info.exact, asked, session_of=carries.evidence,
                          since=index.order(verdict.operation))
    if loss is None:
        return None
    op, before, after = loss
    verb = "deleted" if index.data(after).get("deleted") or index.is_deletion_marker(after) else "overwrote"
    return Verdict(op, _loss_type(index, op, after), f"it {verb} {before}, a unit of the evidence's day "
                   "stating the whole answer, after the evidence's own fact was lost", before,
                   alternatives=[verdict.operation, *verdict.alternatives])


def _passed_beside(case: LineageCase, carries: Carrying, verdict: Verdict, gold: Information,
                   asked: frozenset[str]) -> Verdict | None:
    """The question's earliest search whose store held a unit of a turn beside the evidence stating the whole
    gold (:func:`.survival.said_beside`: alive and not returned), when ``verdict`` blames the evidence's own
    extraction for dropping the fact and that extraction wrote only about other things, or its message's
    sentence does not state the answer (:func:`_says_answer`); ``None`` otherwise.

    The turn beside the one an evidence id names often says the answer (the other speaker's reply restating
    it, the turn the id should have named), and memory held that turn's unit when the question was asked:
    the answer was there to be found, whatever the named turn's extraction kept. The search that passed over
    it failed, and a repaired extraction's fact would have been one more unit for it to pass over. An
    extraction that wrote about the fact, or wrote nothing, from a message stating the answer dropped it
    whatever was said beside: the named turn is the one that said it.
    """
    index = case.index
    op = verdict.operation
    if (verdict.error_type is not ErrorType.EXTRACTION or index.category(op) not in _EXTRACTION_ROLES
            or carries.evidence not in index.inputs(op)
            or (wrote_about(case, carries, op, asked=asked) is not False
                and _says_answer(index, carries.info, gold))):
        return None
    found = _unread(case, said_beside(case, gold, carries.evidence), "a turn beside the evidence said it")
    if found is not None:
        found.alternatives = [verdict.operation, *verdict.alternatives]
    return found


def _answered_best_match(case: LineageCase, stated: Information | None, asked: frozenset[str],
                         answered: frozenset[str]) -> bool:
    """Whether the failed answer (its words ``answered``) restates a line of the answerer's context
    (:func:`_answered_with`) that lacks some of the gold (``stated``) and is as much about the question
    (``asked``: its share of the line's and the question's words together, by IDF weight) as any line there.

    A reader looks for the answer where the context speaks of what the question asks: the line matching
    it best. One that gave that line back did its job with what memory said, and the line holding the fact
    (if one did) matched the question less: the fact was written without what ties it to the question, or
    the memory saying it was not returned. A reader that had the answer and misread it answers with a line
    less about the question, another question's answer, or "I don't know": those stay its mistakes.
    """
    index = case.index
    if stated is None or not stated.gold or not answered:
        return False

    scores: dict[frozenset[str], float] = {}  # the context's versions repeat most of their lines

    def about(tokens: frozenset[str]) -> float:
        # The question's share of what the line says (IDF-weighted overlap over union): a line saying
        # many other things is less about the question than a short one saying as much of it.
        found = scores.get(tokens)
        if found is None and tokens.isdisjoint(asked):
            found = scores[tokens] = 0.0  # what the division below gives, without summing the union
        if found is None:
            union = math.fsum(map(index.idf, tokens | asked))
            found = scores[tokens] = math.fsum(map(index.idf, tokens & asked)) / union if union else 0.0
        return found

    scored = [(about(line), line) for v in _answerer_context(case) for line in index.lines(v)]
    top = max((score for score, _ in scored), default=0.0)
    return top > 0 and any(score >= top and not stated.gold.keys() <= line
                           and _answered_with(index, answered, line, asked) for score, line in scored)


def _answerer_context(case: LineageCase) -> list[str]:
    """The answerer's inputs that are its context (the query aside: it says the question, not the fact)."""
    index = case.index
    return [v for v in index.inputs(case.generator) if index.data(v).get("kind") not in _NOT_CONTEXT]


def _untied_context(case: LineageCase, carries: Carrying, verdict: Verdict) -> bool:
    """Whether ``verdict`` blames the answerer for a context carrier with no tie to the evidence: not
    written from it, while nothing on the evidence's lineage carried the fact when the question was
    asked."""
    return (verdict.error_type is ErrorType.RESPONSE and not carries.structural
            and verdict.carrier is not None and verdict.carrier not in carries.descendants
            and not _alive_carriers(case, carries, carries.lineage_stored())
            and not any(carries.info.answers(line) for line in case.index.lines(verdict.carrier)))


def _says_answer(index: GraphIndex, info: Information, stated: Information | None) -> bool:
    """Whether the evidence sentence (``info``) states the answer: it holds half the whole gold
    (``stated``), by weight and by how rare its words are in the conversation, and does not ask.

    Such a message is no turn beside the one saying the answer, and its gold is not inferred: an
    extraction whose statements are all about its other parts dropped what it said.
    """
    if stated is None or not stated.gold or asks(info.text):
        return False
    said = frozenset(info.gold)
    rare = {t: w * index.idf(t) for t, w in stated.gold.items()}
    return weighted_share(stated.gold, said) >= _SAYS_SHARE and weighted_share(rare, said) >= _SAYS_SHARE


def _choose(case: LineageCase, verdicts: list[Verdict], gold: Information | None = None) -> Verdict | None:
    """One verdict of the per-evidence ones: grounded, of a message stating the whole gold when one does
    (with the losses of a part the reader's context lacks: :func:`_missed_parts`), non-response,
    earliest, suspicious first.

    Each evidence message's verdict names an operation that lost part of
    what the answer needed; MemTrace's rule takes the earliest faulty one
    (an ingestion loss comes before the retrieval that missed another part),
    and spectrum suspiciousness separates operations of the same moment.
    """
    if not verdicts:
        return None
    pool = [v for v in verdicts if v.gold_grounded] or verdicts
    if len({v.operation for v in pool}) > 1:
        # The earliest faulty operation wins only if it was decisive. A message stating the whole answer
        # needed no other: the loss of another message's part (an extraction that dropped it) decided
        # nothing, since a reader given this message's fact would have answered without that part; what
        # kept this fact from the reader (a search that passed over its unit, say) did.
        pool = [v for v in pool if v.says_whole] or pool
    if gold is not None:
        pool = pool + _missed_parts(case.index, verdicts, pool, gold)
    pool = [v for v in pool if not v.returned] or pool
    pool = [v for v in pool if v.error_type is not ErrorType.RESPONSE] or pool
    pool = [v for v in pool if not v.asked] or pool
    pool = [v for v in pool if not v.elsewhere] or pool
    if gold is not None:
        # A loss of a unit stating the whole gold decides whatever its own message's words were (a photo
        # turn's verdict is not grounded in the gold): it competes when it excuses a verdict of the pool.
        removers = [v for v in verdicts if v not in pool and v.error_type in _LOSS_TYPES
                    and any(_held_meanwhile(case.index, held, [v], gold) for held in pool)]
        pool = pool + removers
        pool = [v for v in pool if not _held_meanwhile(case.index, v, pool, gold)] or pool
    operations = list(dict.fromkeys(v.operation for v in pool))
    if len(operations) == 1:
        return pool[0]
    best = _earliest(case.index, pool)
    best.confidence *= 0.8
    best.alternatives = [op for op in operations if op != best.operation]
    return best


def _missed_parts(index: GraphIndex, verdicts: list[Verdict], pool: list[Verdict], gold: Information
                  ) -> list[Verdict]:
    """The verdicts left out of ``pool`` that blame a loss before the reader, when every verdict of
    ``pool`` blames the reader for a context that lacks some of the gold's words, or a search for a unit
    the answerer's context holds (``returned``: the reader had it, whatever the failed answer made of it).

    With several evidence messages each may hold a part of the answer ("Charlotte's Web" in one,
    "Nothing is Impossible" in another, or only in its photo). A context holding one part shows the
    reader had that part, not the answer; another evidence message whose fact was lost before the
    reader (its unit stored but not retrieved, say) kept the rest from it, though that message's
    verdict is not grounded in the gold's words (it says its part in other words, or not at all).
    A context holding every gold word leaves the reader to blame, whatever another message lost.
    """
    # A returned verdict finds no loss on its message's path (the failed answer may even restate the unit,
    # and the walk then blames no reader): it shows the reader had that part, as a reader's verdict does.
    if not gold.gold or any((v.error_type is not ErrorType.RESPONSE and not v.returned) or v.carrier is None
                            for v in pool):
        return []
    had = frozenset().union(*(index.tokens(v.carrier) for v in pool if v.carrier is not None))
    if gold.gold.keys() <= had:
        return []
    return [v for v in verdicts if v not in pool and v.error_type is not ErrorType.RESPONSE]


def _held_meanwhile(index: GraphIndex, verdict: Verdict, pool: list[Verdict], gold: Information) -> bool:
    """Whether ``verdict`` blames an extraction that stored nothing of its message's fact, or a write that
    removed its message's unit, while a unit stating the whole gold, which another verdict's later write
    removed, was in memory.

    With several evidence messages, the earliest faulty operation wins only if it was decisive:
    while a unit saying the whole answer was stored, an extraction that dropped one message's
    part of it did not lose the answer, nor did an overwrite or deletion of one message's unit
    (two speakers saying the same plan, each stored as a unit of their own); the write that later
    removed the unit still saying it did.
    """
    if verdict.error_type not in _LOSS_TYPES | {ErrorType.EXTRACTION} or not gold.gold:
        return False
    dropped = index.order(verdict.operation)
    for other in pool:
        unit = other.carrier
        if (other.error_type in _LOSS_TYPES and unit is not None and index.is_stored(unit)
                and index.produced_at(unit) < dropped < index.order(other.operation)
                and gold.gold.keys() <= index.tokens(unit) and gold.exact <= index.tokens(unit)):
            return True
    return False


def _earliest(index: GraphIndex, pool: list[Verdict]) -> Verdict:
    """The verdict on the earliest operation; spectrum suspiciousness, then node id, among equals.

    Execution orders are unique in a built graph, so the spectrum (a walk over
    every evaluation's slice) is only computed when orders tie.
    """
    first = min(index.order(v.operation) for v in pool)
    tied = [v for v in pool if index.order(v.operation) == first]
    if len({v.operation for v in tied}) == 1:
        return tied[0]
    scores = index.ochiai()
    return min(tied, key=lambda v: (-round(scores.get(v.operation, 0.0), 6), v.operation))


def _fallback(case: LineageCase) -> Verdict:
    """No evidence to follow: the answer's own read path, last step first, then the slice by spectrum.

    Without evidence nothing says where the information was lost; what is
    known is which operations made the failed answer: the generation that
    wrote it, then what built its context. They head the candidates, with a
    low confidence; the rest of the slice follows by spectrum suspiciousness.
    """
    index = case.index
    scores = index.ochiai()
    ops = list(case.operations()) or [case.generator]
    read = sorted((n for n in ops if index.order(n) >= case.query_time and not index.is_step(n)
                   and (n == case.generator or index.category(n) in _READ_PATH)),
                  key=lambda n: (n != case.generator, -index.order(n), n))
    rest = sorted((n for n in ops if n not in read and not index.is_step(n)),
                  key=lambda n: (-round(scores.get(n, 0.0), 6), -index.order(n), n))
    op, *others = read + rest
    kind = ErrorType.RESPONSE if _answers(case, op) else (
        error_type_of_category(index.category(op)) or ErrorType.RESPONSE)
    return Verdict(
        op,
        kind,
        "no evidence could be located; the step that made the failed answer, by default",
        confidence=0.15,
        gold_grounded=False,
        alternatives=others[:_FALLBACK_ALTERNATIVES],
    )


def _lost(failure: FailureCase, evidence: list[str]) -> str:
    if failure.gold:
        gold = " ".join(failure.gold.split())
        return repr(gold if len(gold) <= 60 else gold[:57] + "...")
    return f"the content of {', '.join(evidence) or 'the evidence'}"


_STRUCTURAL_CONFIDENCE = 0.45
"""Confidence of a content-free verdict whose rules all point at one operation."""
_ALTERNATIVE_SHARE = 0.5


def _from_suspects(suspects: list[Suspect]) -> Verdict:
    """The content-free verdict: the top suspect, its confidence its share of all suspects' scores."""
    top = suspects[0]
    share = top.score / sum(s.score for s in suspects)
    return Verdict(top.operation, top.error_type, f"{top.reason} (content not captured: inferred "
                   "from sizes, versions and lineage)", confidence=_STRUCTURAL_CONFIDENCE * share,
                   gold_grounded=False)


def _candidates(G: nx.DiGraph, verdict: Verdict, verdicts: list[Verdict], suspects: list[Suspect], *,
                grounded: bool) -> list[Candidate]:
    """The verdict first, then the other evidence's verdicts, then content-free suspects, by confidence.

    Without content, a suspect's confidence is the verdict's scaled by its score's share
    of the top suspect's, so an alternative as well supported as the verdict ties it;
    with content (``grounded``), what content showed outweighs them by half again.
    """
    found = {verdict.operation: Candidate.of(G, verdict.operation, verdict.error_type, verdict.confidence,
                                             verdict.why)}
    for other in verdicts:
        for op in (other.operation, *other.alternatives):
            if op not in found:
                kind = other.error_type if op == other.operation else None
                found[op] = Candidate.of(G, op, kind, verdict.confidence * _ALTERNATIVE_SHARE, other.why)
    top = suspects[0].score if suspects else 0.0
    for suspect in suspects:
        if suspect.operation not in found and top > 0:
            share = suspect.score / top * (_ALTERNATIVE_SHARE if grounded else 1.0)
            found[suspect.operation] = Candidate.of(G, suspect.operation, suspect.error_type,
                                                    verdict.confidence * share, suspect.reason)
    first, *rest = found.values()
    return [first, *sorted(rest, key=lambda c: -c.confidence)]


def _ambiguous(candidates: list[Candidate]) -> bool:
    """Whether the runner-up is about as well supported as the verdict."""
    return len(candidates) > 1 and candidates[1].confidence >= candidates[0].confidence - AMBIGUITY_MARGIN * (
        candidates[0].confidence or 1.0)


class LineageEngine(Engine):
    """Offline, deterministic root-cause attribution by information presence along lineage.

    Parameters
    ----------
    use_embeddings:
        Rank evidence with the offline embedding model as well as BM25 when
        the evaluation names no evidence (lexical only when ``False``).
    """

    name = "lineage"

    def __init__(self, *, use_embeddings: bool = True) -> None:
        self.use_embeddings = use_embeddings

    def _attribute(self, G: nx.DiGraph, failure: FailureCase, result: Attribution) -> None:
        index = graph_index(G)
        answer = failure.answer
        generator = index.producer(answer) if answer is not None and answer in G else None
        if answer is None or generator is None:
            raise NotAttributed("the evaluation names no answer variable with a producer")
        case = LineageCase.of(index, answer, generator,
                              semantic=embedder() if self.use_embeddings and index.has_content else None)
        evidence, given = find_evidence(G, failure, use_embeddings=self.use_embeddings, stores=case.stores)
        suspects = structural_suspects(case, evidence)
        told = frozenset(evidence)
        verdicts = [v for e in evidence if (v := _trace(case, failure, e, told)) is not None]
        verdict = _from_suspects(suspects) if case.structural and suspects else _choose(
            case, verdicts, critical_information(failure.gold, failure.question) if failure.gold else None)
        guessed = verdict is None
        if verdict is None:
            verdict = _fallback(case)
            verdicts = [verdict]
        elif not given:
            verdict.confidence *= 0.85
        result.candidates = _candidates(G, verdict, verdicts, suspects, grounded=not case.structural)
        result.ambiguous = guessed or _ambiguous(result.candidates)
        result.blame(G, verdict.operation, verdict.error_type)
        result.confidence = round(verdict.confidence, 3)
        result.evidence_path = evidence_path(
            G, evidence, verdict.carrier, verdict.operation, failure
        )
        result.explanation = (
            f"{result.operation_name} ({result.category}) lost {_lost(failure, evidence)}: "
            f"{verdict.why}."
        )


register_engine("lineage", LineageEngine)
