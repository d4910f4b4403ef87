"""Every span name, attribute, event and link key memtrace-otel reads or writes.

The OpenTelemetry GenAI semantic conventions are used where they speak (memory
client spans, retrieval, evaluation events); what they lack lives under
``memtrace.``. One class per namespace, UPPER_SNAKE mirroring the dotted key,
value sets as enums. ``docs/conventions.md`` is the prose version of this
module, and ``tests/test_semconv.py`` keeps the two honest (no key is both a
leaf and a prefix of another, every key here is documented there).
"""

from __future__ import annotations

from enum import StrEnum

# Upstream keys come from the semantic-conventions package (``opentelemetry-semantic-conventions``, a
# dependency of the SDK), so a rename there is a rename here; the keys it does not define yet (the
# memory-client span's ``gen_ai.memory.*``, ``gen_ai.retrieval.top_k``) stay literals below, as
# open-telemetry/semantic-conventions-genai spells them (docs/conventions.md, "Where the keys come from").
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _genai
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import server_attributes as _server

__all__ = [
    "CATEGORY_ERROR_TYPE",
    "CONTENT_KEYS",
    "GENAI_OPERATION_CATEGORY",
    "INSTRUMENTATION_SCOPE",
    "MEMORY_OPERATIONS",
    "Category",
    "ErrorType",
    "EvaluationName",
    "EvaluationScoreLabel",
    "EvaluationSignal",
    "GenAI",
    "GenAIEvent",
    "GenAIOperation",
    "GenAIRecord",
    "MemTrace",
    "MemTraceEvent",
    "MemTraceLink",
    "MemTraceStage",
    "MemTraceStep",
    "RecordMetadata",
    "VariableKind",
    "all_keys",
    "error_type_of_category",
]


INSTRUMENTATION_SCOPE = "memtrace_otel"
"""Instrumentation scope name of the operation spans ``MemoryTracer`` makes."""


class GenAI:
    """Keys from the OpenTelemetry GenAI semantic conventions (``gen_ai.*``), plus ``error.type``.

    All are "Development" in open-telemetry/semantic-conventions-genai;
    ``docs/conventions.md`` says key by key where each comes from and which
    uses are this project's own.
    """

    OPERATION_NAME: str = _genai.GEN_AI_OPERATION_NAME
    """Well-known operation name, see :class:`GenAIOperation`."""
    PROVIDER_NAME: str = _genai.GEN_AI_PROVIDER_NAME
    """The memory or model provider (``mem0``, ``openai``, ...)."""
    MEMORY_STORE_ID = "gen_ai.memory.store.id"
    """Identifier of the memory store the operation acts on."""
    MEMORY_RECORD_ID = "gen_ai.memory.record.id"
    """Identifier of the one memory record a create, update or delete acts on (never on a search, whose
    records are in ``gen_ai.memory.records``)."""
    MEMORY_RECORD_COUNT = "gen_ai.memory.record.count"
    """Number of records written, deleted or returned."""
    MEMORY_QUERY_TEXT = "gen_ai.memory.query.text"
    """Memory search query text (opt-in: content capture)."""
    MEMORY_RECORDS = "gen_ai.memory.records"
    """Records a memory operation stored or returned, JSON per :class:`GenAIRecord` (opt-in: content
    capture)."""
    DATA_SOURCE_ID: str = _genai.GEN_AI_DATA_SOURCE_ID
    """Identifier of the retrieval data source."""
    RETRIEVAL_TOP_K = "gen_ai.retrieval.top_k"
    """Number of documents asked for."""
    RETRIEVAL_QUERY_TEXT: str = _genai.GEN_AI_RETRIEVAL_QUERY_TEXT
    """Query text of a retrieval that is not a memory search (opt-in: content capture)."""
    RETRIEVAL_DOCUMENTS: str = _genai.GEN_AI_RETRIEVAL_DOCUMENTS
    """Documents a retrieval returned, JSON per :class:`GenAIRecord` (opt-in: content capture)."""
    REQUEST_MODEL: str = _genai.GEN_AI_REQUEST_MODEL
    """Model asked for by an LLM-backed step."""
    RESPONSE_MODEL: str = _genai.GEN_AI_RESPONSE_MODEL
    """Model that answered an LLM-backed step, when the provider says."""
    USAGE_INPUT_TOKENS: str = _genai.GEN_AI_USAGE_INPUT_TOKENS
    """Prompt tokens spent by an LLM-backed step."""
    USAGE_OUTPUT_TOKENS: str = _genai.GEN_AI_USAGE_OUTPUT_TOKENS
    """Completion tokens spent by an LLM-backed step."""
    EVALUATION_NAME: str = _genai.GEN_AI_EVALUATION_NAME
    """Name of the evaluation metric (event attribute)."""
    EVALUATION_SCORE_VALUE: str = _genai.GEN_AI_EVALUATION_SCORE_VALUE
    """Numeric evaluation score (event attribute)."""
    EVALUATION_SCORE_LABEL: str = _genai.GEN_AI_EVALUATION_SCORE_LABEL
    """Human-readable verdict, ``pass`` or ``fail`` (event attribute)."""
    EVALUATION_EXPLANATION: str = _genai.GEN_AI_EVALUATION_EXPLANATION
    """Why the evaluator decided so (event attribute)."""
    ERROR_TYPE: str = _error.ERROR_TYPE
    """Exception class name when an operation raised."""
    SERVER_ADDRESS: str = _server.SERVER_ADDRESS
    """Host of the memory service or remote vector store the operation talks to, when known."""
    SERVER_PORT: str = _server.SERVER_PORT
    """Its port (set only with ``server.address``)."""
    # Read (never written) from the spans of GenAI client instrumentations (openai-v2 ...):
    # a model call made inside a memory operation becomes one of its internal steps in the graph.
    INPUT_MESSAGES: str = _genai.GEN_AI_INPUT_MESSAGES
    """Messages sent to the model, JSON ``[{"role", "parts": [{"type", "content"}]}]`` (their opt-in)."""
    OUTPUT_MESSAGES: str = _genai.GEN_AI_OUTPUT_MESSAGES
    """Messages the model returned, JSON like ``gen_ai.input.messages`` (their opt-in)."""
    SYSTEM_INSTRUCTIONS: str = _genai.GEN_AI_SYSTEM_INSTRUCTIONS
    """System instructions sent apart from the messages, JSON ``[{"type", "content"}]`` (their opt-in)."""
    RESPONSE_ID: str = _genai.GEN_AI_RESPONSE_ID
    """The provider's id of the model's response."""
    PROMPT: str = _genai.GEN_AI_PROMPT
    """Older form: attribute of the ``gen_ai.content.prompt`` span event, the messages as JSON."""
    COMPLETION: str = _genai.GEN_AI_COMPLETION
    """Older form: attribute of the ``gen_ai.content.completion`` span event, the choices as JSON."""


class GenAIOperation(StrEnum):
    """Values of ``gen_ai.operation.name`` used for memory and retrieval spans."""

    CREATE_MEMORY = "create_memory"
    UPDATE_MEMORY = "update_memory"
    UPSERT_MEMORY = "upsert_memory"
    DELETE_MEMORY = "delete_memory"
    SEARCH_MEMORY = "search_memory"
    RETRIEVAL = _genai.GenAiOperationNameValues.RETRIEVAL.value
    CHAT = _genai.GenAiOperationNameValues.CHAT.value
    # Model calls of GenAI client instrumentations (read only, see GENAI_CALL_OPERATIONS).
    TEXT_COMPLETION = _genai.GenAiOperationNameValues.TEXT_COMPLETION.value
    GENERATE_CONTENT = _genai.GenAiOperationNameValues.GENERATE_CONTENT.value
    EMBEDDINGS = _genai.GenAiOperationNameValues.EMBEDDINGS.value


MEMORY_OPERATIONS: frozenset[GenAIOperation] = frozenset({
    GenAIOperation.CREATE_MEMORY, GenAIOperation.UPDATE_MEMORY, GenAIOperation.UPSERT_MEMORY,
    GenAIOperation.DELETE_MEMORY, GenAIOperation.SEARCH_MEMORY,
})
"""The operations the conventions' memory-client span covers (``gen_ai.memory.*`` keys);
a retrieval on any other span uses the ``gen_ai.retrieval.*`` keys."""


class GenAIRecord:
    """Fields of one element of ``gen_ai.memory.records`` / ``gen_ai.retrieval.documents`` (JSON)."""

    ID = "id"
    """The record's id in its store."""
    CONTENT = "content"
    """The record's text, truncated like every captured content."""
    SCORE = "score"
    """Relevance score, when the retriever gives one."""


class GenAIEvent:
    """Event names from the GenAI conventions."""

    EVALUATION_RESULT = "gen_ai.evaluation.result"
    """The evaluation event (an event name: the package defines attribute keys only)."""
    CONTENT_PROMPT = "gen_ai.content.prompt"
    """Older form of a model call's prompt: a span event with ``gen_ai.prompt`` (read only)."""
    CONTENT_COMPLETION = "gen_ai.content.completion"
    """Older form of a model call's completion: a span event with ``gen_ai.completion`` (read only)."""


class EvaluationScoreLabel(StrEnum):
    """Values of ``gen_ai.evaluation.score.label`` this project writes."""

    PASS = "pass"
    FAIL = "fail"


class EvaluationName(StrEnum):
    """Values of ``gen_ai.evaluation.name`` this project writes by default."""

    ANSWER_CORRECTNESS = "memtrace.answer_correctness"


class MemTrace:
    """``memtrace.*`` span attributes: lineage the GenAI conventions lack.

    Each variable is described once, by the span that wrote it (or, for an
    external input, the first span that read it), as one compact descriptor
    string: the SDK validates every attribute element by element, so three
    arrays instead of a dozen keep a traced operation within 2x of a bare span.
    Arrays survive every backend (Jaeger drops link attributes, keeps tags).
    """

    OPERATION_NAME = "memtrace.operation.name"
    """Application-level operation name, e.g. ``mem0.extract``."""
    OPERATION_CATEGORY = "memtrace.operation.category"
    """One of :class:`Category`."""
    OPERATION_OUTCOME = "memtrace.operation.outcome"
    """Free-form outcome marker set by the application (``noop``, ``skipped``, ...)."""

    INPUTS = "memtrace.inputs"
    """Variable ids (``name@version``) the operation read."""
    OUTPUTS = "memtrace.outputs"
    """Variable ids the operation wrote (new versions for in-place changes)."""
    VARIABLES = "memtrace.variables"
    """Descriptors ``"<kind> <size> <hash> <id>"`` of the variables this span describes:
    its outputs, and the inputs no traced operation wrote (external inputs)."""
    VARIABLE_CONTENTS = "memtrace.variable.contents"
    """Contents parallel to ``memtrace.variables``, truncated (opt-in: content capture)."""
    DELETED = "memtrace.deleted"
    """Output ids that are tombstones: the unit stops existing at that version."""
    MEM0_ADD = "memtrace.mem0.add"
    """A packed mem0 ``add``: its stages' raw facts as compact JSON, from which the graph builder derives
    what its stage events recorded (``docs/conventions.md``, "The packed mem0 ``add``")."""
    MEM0_SEARCH = "memtrace.mem0.search"
    """A packed mem0 ``search``: its query, context and returned records' lineage as compact JSON, from
    which the graph builder derives its inputs, outputs and links (``docs/conventions.md``, "The packed
    mem0 ``search``")."""

    EVALUATION_PASSED = "memtrace.evaluation.passed"
    """Verdict of an evaluation operation."""
    EVALUATION_SCORE = "memtrace.evaluation.score"
    """Score of an evaluation operation (F1, judge score ...)."""
    EVALUATION_SIGNAL = "memtrace.evaluation.signal"
    """Which failure signal the verdict rests on, see :class:`EvaluationSignal`."""
    EVALUATION_QUESTION = "memtrace.evaluation.question"
    """The question asked (opt-in: content capture)."""
    EVALUATION_PREDICTION = "memtrace.evaluation.prediction"
    """The answer judged (opt-in: content capture)."""
    EVALUATION_GOLD = "memtrace.evaluation.gold"
    """Gold answer or user correction (opt-in: content capture)."""
    EVALUATION_EXPLANATION = "memtrace.evaluation.explanation"
    """Judge explanation (opt-in: content capture)."""
    EVALUATION_EVIDENCE = "memtrace.evaluation.evidence"
    """Ids of the messages that hold the answer, when known."""
    EVALUATION_ANSWER = "memtrace.evaluation.answer"
    """Variable id of the answer that was judged."""
    EVALUATION_CASE = "memtrace.evaluation.case"
    """Application-chosen id of the question/case, to join with labels."""

    STEP_NAMES = "memtrace.steps"
    """Names of the operation's internal steps, in order (prompt, raw response ...)."""

    CONTENT_REF = "memtrace.content_ref"
    """URL of the content store holding this span's contents (upload on, issue 12): each variable's
    text is stored under the hash in its ``memtrace.variables`` descriptor."""
    EVALUATION_TEXTS_REF = "memtrace.evaluation.texts_ref"
    """``"<field> <hash>"`` of the verdict texts stored in the ``memtrace.content_ref`` store."""


class MemTraceEvent:
    """``memtrace.*`` event names (a separate namespace from attribute keys)."""

    STEP = "memtrace.step"
    """One internal step of an operation, described by :class:`MemTraceStep`."""
    STAGE = "memtrace.stage"
    """A stage of an operation recorded on its span instead of as a child span (mem0's ``add``:
    extraction, the search of existing memories, the decision), described by :class:`MemTraceStage`
    and the operation keys of :class:`MemTrace`; the graph builder makes it an operation node of its
    own, as it would the child span."""


class MemTraceStep:
    """Attributes of a ``memtrace.step`` event."""

    NAME = "memtrace.step.name"
    """Step name (``prompt``, ``llm_response``, ``parse`` ...)."""
    INPUTS = "memtrace.step.inputs"
    """Variable ids the step read."""
    OUTPUTS = "memtrace.step.outputs"
    """Variable ids the step wrote (intermediate variables of the operation)."""


class MemTraceStage:
    """Attributes of a ``memtrace.stage`` event besides the operation keys it shares with spans
    (``memtrace.operation.name`` / ``.category``, ``memtrace.inputs``, ``memtrace.outputs``,
    ``memtrace.variables``, ``memtrace.steps`` ...)."""

    ID = "memtrace.stage.id"
    """The stage's own id, 16 lowercase hex digits like a span id and unique as one: its operation
    node is ``op:<trace_id>:<stage id>``, and a verdict or a record's lineage names it as a span."""
    START = "memtrace.stage.start_time_unix_nano"
    """When the stage started (the event's own time is when it ended)."""
    JOINED = ("memtrace.inputs", "memtrace.outputs", "memtrace.deleted", "memtrace.variables",
              "memtrace.steps")
    """The lineage lists a stage event may carry as one string, the elements joined by
    :data:`STAGE_LIST_SEPARATOR` (the SDK then checks one value instead of each element; a reader
    takes a string there as the list it joins, an array as itself). ``memtrace.variable_contents``
    stays an array: contents hold newlines."""


STAGE_LIST_SEPARATOR = "\n"
"""Joins a stage event's lineage list into one string (:attr:`MemTraceStage.JOINED`); a value, not a
key, so it stays out of :func:`all_keys`."""


class MemTraceLink:
    """Attributes on the span link from a consumer to a variable's producer."""

    VARIABLE = "memtrace.link.variable"
    """The variable id that flowed along the link (the consumer read it)."""


class RecordMetadata:
    """Keys written into a memory record's own metadata so lineage survives storage."""

    TRACEPARENT = "memtrace_traceparent"
    """W3C traceparent of the span that wrote the record."""
    VARIABLE = "memtrace_variable"
    """Variable id (``name@version``) the record holds."""


class Category(StrEnum):
    """What role an operation plays in the memory pipeline."""

    INGEST = "ingest"
    EXTRACTION = "extraction"
    UPDATE = "update"
    DELETION = "deletion"
    RETRIEVAL = "retrieval"
    RERANK = "rerank"
    GENERATION = "generation"
    EVALUATION = "evaluation"
    OTHER = "other"
    LLM_CALL = "llm_call"
    """An internal step: a GenAI client call (chat, embeddings ...) made inside a memory operation,
    built from another instrumentation's span (``graph/genai_steps.py``). No error type of its own:
    a fault in it is its parent operation's."""


class VariableKind(StrEnum):
    """What a variable is."""

    MESSAGE = "message"
    MEMORY_UNIT = "memory_unit"
    STORE = "store"
    QUERY = "query"
    CONTEXT = "context"
    PROMPT = "prompt"
    RESPONSE = "response"
    FACTS = "facts"
    ANSWER = "answer"
    GOLD = "gold"
    VERDICT = "verdict"
    OTHER = "other"


class EvaluationSignal(StrEnum):
    """The failure signal an evaluation rests on, from richest to poorest.

    ``docs/architecture.md`` says how much each degrades attribution.
    """

    GOLD = "gold"
    """A gold answer is known (benchmarks, labelled sets)."""
    CORRECTION = "correction"
    """The user corrected the answer: the correction plays the gold's role."""
    JUDGE = "judge"
    """An LLM or rule judge said fail, with an explanation and no gold."""
    FEEDBACK = "feedback"
    """Only a thumbs-down: the question is all there is."""


class ErrorType(StrEnum):
    """The five MemTrace error types; each names the role of the faulty operation."""

    EXTRACTION = "ExtractionError"
    UPDATE = "UpdateError"
    DELETION = "DeletionError"
    RETRIEVAL = "RetrievalError"
    RESPONSE = "ResponseError"


CATEGORY_ERROR_TYPE: dict[Category, ErrorType] = {
    Category.INGEST: ErrorType.EXTRACTION,
    Category.EXTRACTION: ErrorType.EXTRACTION,
    Category.UPDATE: ErrorType.UPDATE,
    Category.DELETION: ErrorType.DELETION,
    Category.RETRIEVAL: ErrorType.RETRIEVAL,
    Category.RERANK: ErrorType.RETRIEVAL,
    Category.GENERATION: ErrorType.RESPONSE,
}
"""The one mapping from an operation's role to the error type a fault of that role is.

``ingest`` writes memory from messages, so a fault there is an extraction fault.
``evaluation`` and ``other`` have no error type of their own."""


def error_type_of_category(category: Category | str | None) -> ErrorType | None:
    """The error type of a faulty operation of ``category``; ``None`` for roles that have none.

    >>> error_type_of_category("rerank").value
    'RetrievalError'
    >>> error_type_of_category(Category.INGEST).value
    'ExtractionError'
    >>> error_type_of_category("evaluation") is None
    True
    """
    if category is None:
        return None
    try:
        return CATEGORY_ERROR_TYPE.get(Category(category))
    except ValueError:
        return None


GENAI_OPERATION_CATEGORY: dict[GenAIOperation, Category] = {
    GenAIOperation.CREATE_MEMORY: Category.EXTRACTION,
    GenAIOperation.UPDATE_MEMORY: Category.UPDATE,
    GenAIOperation.UPSERT_MEMORY: Category.UPDATE,
    GenAIOperation.DELETE_MEMORY: Category.DELETION,
    GenAIOperation.SEARCH_MEMORY: Category.RETRIEVAL,
    GenAIOperation.RETRIEVAL: Category.RETRIEVAL,
}
"""The category a GenAI memory span stands for when it carries no ``memtrace.operation.category``
(spans from other GenAI memory instrumentations)."""


CONTENT_KEYS: frozenset[str] = frozenset({
    GenAI.MEMORY_QUERY_TEXT, GenAI.MEMORY_RECORDS, GenAI.RETRIEVAL_QUERY_TEXT, GenAI.RETRIEVAL_DOCUMENTS,
    GenAI.EVALUATION_EXPLANATION, MemTrace.VARIABLE_CONTENTS, MemTrace.EVALUATION_QUESTION,
    MemTrace.EVALUATION_PREDICTION, MemTrace.EVALUATION_GOLD, MemTrace.EVALUATION_EXPLANATION,
})
"""Keys whose values are content: written only with content capture on (the GenAI opt-in)."""


def all_keys() -> list[str]:
    """Every attribute, event and link key declared in this module.

    >>> "memtrace.inputs" in all_keys()
    True
    """
    keys: list[str] = []
    for namespace in (GenAI, MemTrace, MemTraceStep, MemTraceStage, MemTraceLink, MemTraceAttribution,
                      MemTraceBench, SmartComment, LoongsuiteMem0, MemTraceTarget):
        keys.extend(
            value
            for name, value in vars(namespace).items()
            if name.isupper() and isinstance(value, str)
        )
    return keys


# -- Write-back spans ------------------------------------------------------------------------
# Appended for the live pipeline (issue 9): what an attribution verdict looks like as spans.


class MemTraceAttribution:
    """Attributes of the write-back spans that carry an attribution verdict.

    Plain strings (and one double), so that Jaeger's tag search
    (``memtrace.error_type=RetrievalError``) and TraceQL
    (``{ span.memtrace.error_type = "RetrievalError" }``) find them.
    """

    ANNOTATION = "memtrace.annotation"
    """Marks a write-back span; its value is the span's role, see :class:`AnnotationSpan`.
    Write-back spans carry no operation category, so the graph builder leaves them out."""
    ERROR_TYPE = "memtrace.error_type"
    """The failure's error type, see :class:`ErrorType`."""
    ROOT_CAUSE_OPERATION_NAME = "memtrace.root_cause.operation.name"
    """Application-level name of the root-cause operation."""
    ROOT_CAUSE_OPERATION_CATEGORY = "memtrace.root_cause.operation.category"
    """Category of the root-cause operation, see :class:`Category`."""
    ROOT_CAUSE_TRACE_ID = "memtrace.root_cause.trace_id"
    """Trace id of the root-cause span, 32 lowercase hex digits."""
    ROOT_CAUSE_SPAN_ID = "memtrace.root_cause.span_id"
    """Span id of the root-cause span, 16 lowercase hex digits."""
    ROOT_CAUSE_SPAN_NAME = "memtrace.root_cause.span.name"
    """Name of the root-cause span, as the trace UI lists it (``update_memory tiny-memory``)."""
    EVALUATION_TRACE_ID = "memtrace.attribution.evaluation.trace_id"
    """Trace id of the failed evaluation span."""
    EVALUATION_SPAN_ID = "memtrace.attribution.evaluation.span_id"
    """Span id of the failed evaluation span."""
    ENGINE = "memtrace.attribution.engine"
    """Name of the engine that attributed (``lineage``, ``llm_agent`` ...)."""
    CONFIDENCE = "memtrace.attribution.confidence"
    """The engine's confidence in the verdict, 0 to 1."""
    EXPLANATION = "memtrace.attribution.explanation"
    """Why the engine blamed that operation (quotes content only with content capture on)."""
    EVIDENCE_PATH = "memtrace.attribution.evidence_path"
    """Graph node ids from the evidence to the evaluation through the root cause; on the
    ``memtrace.attribution.evidence`` event (:data:`EVIDENCE_EVENT`), not among the span's tags."""
    ALTERNATIVES = "memtrace.attribution.alternatives"
    """The runners-up, best first, short: span name, error type and confidence of each."""
    FAILURE_REASON = "memtrace.attribution.failure_reason"
    """Why no operation could be blamed (only on unattributed failures)."""
    ROOT_CAUSE_STAGE_ID = "memtrace.root_cause.stage.id"
    """When the root cause is a stage recorded as a ``memtrace.stage`` event: its stage id (the
    ``memtrace.root_cause.span_id`` is then the span the event is on, the annotation's parent)."""
    STEP_SPAN_ID = "memtrace.attribution.step.span_id"
    """Span id of the model call inside the root cause that went wrong (its internal ``llm_call`` step;
    only when the blamed operation has steps)."""
    STEP_NAME = "memtrace.attribution.step.name"
    """Span name of that model call (``chat gpt-4o-mini`` ...)."""
    PROVISIONAL = "memtrace.attribution.provisional"
    """``true`` on a verdict made while the trace backend failed (traces it needed were missing):
    ``memtrace serve`` judges the failure again when the backend answers."""
    SUPERSEDES = "memtrace.attribution.supersedes"
    """On the verdict that replaces provisional ones: the span ids of their ``memtrace.attribution`` spans."""


class AnnotationSpan(StrEnum):
    """Names of the write-back spans, also the values of ``memtrace.annotation``."""

    ATTRIBUTION = "memtrace.attribution"
    """In the failed trace, child of the failed evaluation span."""
    ROOT_CAUSE = "memtrace.root_cause"
    """In the root-cause span's trace, child of the root-cause span."""


WRITEBACK_SCOPE = "memtrace_otel.writeback"
"""Instrumentation scope of the write-back spans; the in-process processor ignores its spans."""
EVIDENCE_EVENT = "memtrace.attribution.evidence"
"""Event of a write-back span holding the evidence path (``memtrace.attribution.evidence_path``)."""
ROOT_CAUSE_EVALUATION_NAME = "memtrace.root_cause"
"""``gen_ai.evaluation.name`` of the ``gen_ai.evaluation.result`` event on write-back spans."""



class MemTraceBench:
    """Attributes only the benchmark's reference systems write."""

    SESSION = "memtrace.bench.session"
    """Index of the LoCoMo session an ingestion trace holds (on its root operation)."""


__all__ += ["EVIDENCE_EVENT", "ROOT_CAUSE_EVALUATION_NAME", "WRITEBACK_SCOPE", "AnnotationSpan",
            "MemTraceAttribution", "MemTraceBench"]


# -- smartcomment import ----------------------------------------------------------------------
# Appended for issue 11: what a smartcomment execution graph keeps on the spans it becomes
# (docs/smartcomment.md). The graph builder reads none of these; labels are for scoring only.

SMARTCOMMENT_SCOPE = "memtrace_otel.smartcomment"
"""Instrumentation scope of the spans converted from smartcomment graphs."""


class SmartComment:
    """Keys of the spans converted from smartcomment (``ExecNetwork.export_graph()``) files."""

    GRAPH_ID = "smartcomment.graph.id"
    """The graph's ``graph_id`` (on every converted span)."""
    SESSION_ID = "smartcomment.session.id"
    """The session's ``session_id`` (on the session's root span)."""
    SESSION_NAME = "smartcomment.session.name"
    """The session's ``session_name``."""
    SESSION_CATEGORY = "smartcomment.session.category"
    """The session's ``category``."""
    OP_ID = "smartcomment.op.id"
    """The operation's ``op_id``."""
    OP_CATEGORY = "smartcomment.op.category"
    """The operation's category as written (mapped to ``memtrace.operation.category`` by one table)."""
    OP_COMMENT = "smartcomment.op.comment"
    """The operation's developer comment."""
    EDGE_IDS = "smartcomment.edge.ids"
    """The ``edge_id`` of each edge the operation made (parallel to the next three)."""
    EDGE_SOURCES = "smartcomment.edge.sources"
    """Each edge's ``source_full_node_id`` (the NONE sentinel included)."""
    EDGE_TARGETS = "smartcomment.edge.targets"
    """Each edge's ``target_full_node_id``."""
    EDGE_CATEGORIES = "smartcomment.edge.categories"
    """Each edge's ``category``."""
    VARIABLE_IDS = "smartcomment.variable.ids"
    """Parallel to ``memtrace.variables``: each variable's original ``full_node_id``."""
    VARIABLE_CATEGORIES = "smartcomment.variable.categories"
    """Parallel to ``memtrace.variables``: each variable's ``category`` as written."""
    GOLDEN_ANSWERS = "smartcomment.annotation.golden_answers"
    """A MemTraceBench annotation's ``golden_answers``."""
    SOURCE_EVIDENCE_IDS = "smartcomment.annotation.source_evidence_ids"
    """A MemTraceBench annotation's ``source_evidence_ids`` as written."""
    LABEL_ERROR_TYPE = "smartcomment.label.error_type"
    """Gold label: the annotation's ``final_error_type``. For scoring only; engines never read it."""
    LABEL_OP_ID = "smartcomment.label.op_id"
    """Gold label: the annotation's ``final_op_id``. For scoring only."""
    LABEL_SPAN_ID = "smartcomment.label.span_id"
    """Gold label: the span id ``final_op_id`` was converted to (absent when it names no operation)."""


__all__ += ["SMARTCOMMENT_SCOPE", "SmartComment"]


# -- GenAI calls inside memory operations -----------------------------------------------------
# Appended for issue 10: the model calls another instrumentation traces inside a memory operation.

GENAI_CALL_OPERATIONS: frozenset[GenAIOperation] = frozenset({
    GenAIOperation.CHAT, GenAIOperation.TEXT_COMPLETION, GenAIOperation.GENERATE_CONTENT,
    GenAIOperation.EMBEDDINGS,
})
"""``gen_ai.operation.name`` values of model-call spans: under a memory operation, each becomes one
of its internal ``llm_call`` steps (prompt -> raw response) in the graph."""
GENAI_GENERATION_OPERATIONS: frozenset[GenAIOperation] = GENAI_CALL_OPERATIONS - {GenAIOperation.EMBEDDINGS}
"""Model calls that answer with text: the operation's outputs are derived from their responses."""

__all__ += ["GENAI_CALL_OPERATIONS", "GENAI_GENERATION_OPERATIONS"]


# -- Failure signals from other tools, and metrics ------------------------------------------------
# Appended for issue 26 (items 3 and 4): a verdict recorded apart from the answer it judges, and the
# metrics the processor and `memtrace serve` report (names in the OTel metric conventions' style:
# dotted, lower case, unit in UCUM, counts as `{failure}`-style annotations).


class MemTraceTarget:
    """Attributes of an evaluation span recorded apart from the answer it judges
    (:func:`memtrace_otel.feedback.record_feedback`: a thumbs-down, a correction or a judge's verdict
    arriving later, from another request or process). The span also links to the judged span; the
    ids are repeated as attributes because Jaeger keeps a link's target but not its attributes."""

    TRACE_ID = "memtrace.evaluation.target.trace_id"
    """Trace id of the judged span (the answer's), 32 lowercase hex digits."""
    SPAN_ID = "memtrace.evaluation.target.span_id"
    """Span id of the judged span, 16 lowercase hex digits."""


class MemTraceMetric:
    """Metric instruments of attribution (meter ``memtrace_otel.writeback``): name, unit, description."""

    FAILURES = "memtrace.attribution.failures"
    FAILURES_UNIT = "{failure}"
    FAILURES_DESCRIPTION = ("Failed answers attributed, by error type, blamed operation and the blamed "
                            "operation's service; error type 'none' when no operation could be blamed")
    DURATION = "memtrace.attribution.duration"
    DURATION_UNIT = "s"
    DURATION_DESCRIPTION = ("Time spent attributing one failed answer: gathering its traces, building the "
                            "graph, running the engine, writing the verdict")
    DROPPED = "memtrace.attribution.dropped"
    DROPPED_UNIT = "{failure}"
    DROPPED_DESCRIPTION = ("Failed answers not attributed, by reason (queue_full, shutdown, evicted, "
                           "over_budget, error)")


class MemTraceMetricAttribute:
    """Attributes of the metric points (low cardinality: names and types, never ids)."""

    ERROR_TYPE = "memtrace.error_type"
    """As on the annotation spans, or ``none``."""
    OPERATION_NAME = "memtrace.root_cause.operation.name"
    """The blamed operation's application-level name (``mem0.update`` ...), or ``none``."""
    SERVICE_NAME = "service.name"
    """The blamed operation's service (the resource's ``service.name``), or ``unknown``."""
    REASON = "memtrace.drop.reason"
    """Why a failure was not attributed (:data:`MemTraceMetric.DROPPED`)."""
    SOURCE = "memtrace.attribution.source"
    """Who attributed: ``processor`` or ``serve``."""


__all__ += ["MemTraceMetric", "MemTraceMetricAttribute", "MemTraceTarget"]


# -- Memory spans of other instrumentations -----------------------------------------------------
# Appended for issue 26 (item 2): keys read (never written) from the spans of other mem0
# instrumentations, so their memory operations enter the graph by record id (graph/foreign.py).


class LoongsuiteMem0:
    """Keys of loongsuite-instrumentation-mem0 (0.9.0) spans, read by :mod:`memtrace_otel.graph.foreign`.

    Not GenAI conventions: loongsuite's own ``gen_ai.memory.*`` keys for mem0.
    """

    OPERATION = "gen_ai.memory.operation"
    """The mem0 method (``add``, ``update``, ``search`` ...); ``gen_ai.operation.name`` is
    :data:`LOONGSUITE_MEMORY_OPERATION` on all of them."""
    RECORD_ID = "gen_ai.memory.id"
    """The record an ``update``, ``delete`` or ``get`` acts on."""
    INPUT_MESSAGES = "gen_ai.memory.input.messages"
    """The call's main input (an update's new text), with loongsuite's content capture."""
    OUTPUT_MESSAGES = "gen_ai.memory.output.messages"
    """``str()`` of mem0's result (records with ids, texts, events), with loongsuite's content capture."""


LOONGSUITE_MEMORY_OPERATION = "memory_operation"
"""``gen_ai.operation.name`` of every loongsuite-instrumentation-mem0 memory span."""

__all__ += ["LOONGSUITE_MEMORY_OPERATION", "LoongsuiteMem0"]
