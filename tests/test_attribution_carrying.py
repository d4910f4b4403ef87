"""What carries a fact when an extractor rewrites it (issue 23, the real mem0 with a paraphrasing model).

Each test fails without the mechanism it names.
"""

from __future__ import annotations

import json

import pytest

from memtrace_otel.attribution.presence import critical_information, tokenize
from memtrace_otel.text import readable

WALK = "What did Caroline find in her neighborhood during her walk?"
SAID = ("[25 August 2023] Caroline: I was out walking in my neighborhood when I came across this cool "
        "rainbow sidewalk for Pride Month.")
EXTRACTED = ("Caroline found a rainbow sidewalk that reminded her that love and acceptance are everywhere "
             "(25 August 2023).")  # far from the turn in embedding space: only the rare gold ties them


def test_a_rare_gold_said_whole_identifies_the_fact_without_the_circumstances_the_question_asks_by():
    """The extractor kept 'rainbow sidewalk' and left out 'walking in my neighborhood': a gold this rare
    identifies the fact; a common one does not, and neither does a line without all of it."""
    rare = critical_information("a rainbow sidewalk", WALK, SAID, specific=lambda _tokens: True)
    common = critical_information("a rainbow sidewalk", WALK, SAID, specific=lambda _tokens: False)
    assert rare.identified_by(tokenize(EXTRACTED)) and not common.identified_by(tokenize(EXTRACTED))
    assert not rare.identified_by(tokenize("Caroline saw a rainbow during her walk (25 August 2023)."))
    assert not rare.carried_by(tokenize(EXTRACTED))  # the plain presence test still asks for the topic


def _ask(mt, ops: dict[str, str], question: str, returned: list, prediction: str, gold: str,  # type: ignore[no-untyped-def]
         evidence: list[str], **evaluation) -> None:
    """One question over store "s": a search whose context is the ``returned`` units, an answer of
    ``prediction``, and a judge that fails it; the search's and the answer's operation ids go in ``ops``."""
    from memtrace_otel import Category, VariableKind

    with mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory", store_id="s") as op:
        ops["search"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
        op.write("query:q1", question, kind=VariableKind.QUERY)
        read = [op.read(unit) for unit in returned]
        retrieved = op.write("context:q1", "\n".join(str(unit.content) for unit in read),
                             kind=VariableKind.CONTEXT)
    with mt.operation("answer", Category.GENERATION) as op:
        ops["answer"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
        op.read(retrieved)
        answer = op.write("answer:q1", prediction, kind=VariableKind.ANSWER)
    with mt.operation("judge", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question=question, prediction=prediction, gold=gold, evidence=evidence,
                             answer=answer, case_id="q1", **evaluation)


def _walk_history(provider, quoted: bool, returned: str = "D1:2",  # type: ignore[no-untyped-def]
                  again: str | None = None):
    """Caroline's walk turn extracted without its circumstances, then a search that missed the unit.
    With ``quoted``, Melanie's later turn repeats the gold word for word and is stored as said; with
    ``again``, Caroline's own later turn says it again, extracted as ``again``. The search returns the
    unit written from turn ``returned``."""
    from memtrace_otel import Category, MemoryTracer, VariableKind

    mt = MemoryTracer(provider, capture_content=True)
    ops: dict[str, str] = {}
    turns = {"D1:1": (SAID, EXTRACTED),
             "D1:2": ("[25 August 2023] Melanie: I painted a lake sunrise last year.",
                      "Melanie painted a lake sunrise in 2022 (25 August 2023).")}
    if quoted:
        turns["D1:3"] = ("[26 August 2023] Melanie: You found a vibrant rainbow sidewalk during Pride Month.",
                         "You found a vibrant rainbow sidewalk during Pride Month.")
    if again:
        turns["D1:4"] = ("[27 August 2023] Caroline: I keep thinking of that rainbow sidewalk I came across "
                         "walking in my neighborhood for Pride Month.", again)
    units = {}
    for dia_id, (text, fact) in turns.items():
        with mt.operation("extract", Category.EXTRACTION, store_id="s") as op:
            ops[f"extract {dia_id}"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
            message = op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
            kept = "Caroline went out." if quoted and dia_id == "D1:1" else fact
            facts = op.write(f"facts:{dia_id}", kept, kind=VariableKind.FACTS)
            op.step("extract", [message], [facts])
        with mt.operation("create", Category.UPDATE, gen_ai_operation="create_memory", store_id="s") as op:
            op.read(facts)
            units[dia_id] = op.write(f"mem:{dia_id}", str(facts.content), kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, WALK, [units[returned]], "a lake sunrise", "a rainbow sidewalk", ["D1:1"])
    return ops


def _walk_verdict(exporter):  # type: ignore[no-untyped-def]
    from memtrace_otel.attribution import FailureCase
    from memtrace_otel.attribution.lineage import LineageEngine
    from memtrace_otel.graph.build import build_graph
    from memtrace_otel.graph.query import failed_evaluations
    from memtrace_otel.spans.model import record_from_readable

    G = build_graph(record_from_readable(s) for s in exporter.get_finished_spans())
    return LineageEngine().attribute(G, FailureCase.from_graph(G, failed_evaluations(G)[0]))


def test_a_unit_written_from_the_evidence_that_keeps_a_rare_gold_carries_it(tracer_provider, span_exporter):
    from memtrace_otel.attribution import ErrorType

    ops = _walk_history(tracer_provider, quoted=False)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["search"], ErrorType.RETRIEVAL)


def test_another_message_repeating_a_rare_gold_does_not_carry_the_evidence(tracer_provider, span_exporter):
    """Only a statement written from the evidence counts: Melanie's own words are Melanie's message."""
    from memtrace_otel.attribution import ErrorType

    ops = _walk_history(tracer_provider, quoted=True)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["extract D1:1"], ErrorType.EXTRACTION)


@pytest.mark.parametrize(("again", "blamed", "error_type"), [
    ("Caroline keeps thinking of the rainbow sidewalk from Pride Month (27 August 2023).", "extract D1:1",
     "ExtractionError"),
    ("Caroline came across a rainbow sidewalk walking in her neighborhood for Pride Month (27 August 2023).",
     "answer", "ResponseError"),
])
def test_a_context_with_the_gold_from_another_message_is_no_response_error_when_memory_never_had_the_fact(
        tracer_provider, span_exporter, again, blamed, error_type):
    """The reader had a unit of Caroline's later turn saying the gold again, but nothing written from the
    evidence turn held the fact when the question was asked: the gold's words in the context are another
    message's, and the extraction that kept none of the evidence's fact is the first loss, not the
    reader. Unless that unit answers the question as the evidence does (the whole gold, and the walk in
    her neighborhood the question asks by): then the reader had the answer, whichever turn it came from."""
    ops = _walk_history(tracer_provider, quoted=True, returned="D1:4", again=again)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type.value) == (ops[blamed], error_type)


def test_a_locomo_date_header_resolves_relative_times():
    """mem0 apps send LoCoMo's own date string as the turn's header: 'yesterday' is resolved against it."""
    line = "[3:19 pm on 28 August, 2023] Melanie: I took my kids to a park yesterday."
    assert readable(line) == ("[3:19 pm on 28 August, 2023] Melanie: I took my kids to a park yesterday "
                              "[27 August 2023].")
    info = critical_information("27 August 2023", "When did Melanie go to the park?", readable(line))
    assert info.carried_by(tokenize("Melanie took her kids to a park (27 August 2023)."))
    assert not info.carried_by(tokenize("Melanie took her kids to a park (28 August 2023)."))


CAMPED = ("[10:37 am on 27 June, 2023] Melanie: It was an awesome time, Caroline! We explored nature, "
          "roasted marshmallows around the campfire and even went on a hike. The 2 younger kids love nature.")


def test_a_gold_only_the_header_says_singles_out_no_sentence():
    """The message says its day in its header only (the gold's date; no sentence says "last week" or a
    word of the question): every sentence shares the header, so none is the fact, and the whole message
    is. Another fact of that day by the same speaker holds the date and her name, not what she said."""
    info = critical_information("The week before 27 June 2023", "When did Melanie go camping in June?",
                                CAMPED)
    assert info.whole and "marshmallows" in info.text
    assert not info.carried_by(tokenize("Melanie mentioned that good on you for going after what you really "
                                        "care about (27 June 2023)."))
    assert info.carried_by(tokenize("Melanie went camping with her family, explored nature, roasted "
                                    "marshmallows and went on a hike (27 June 2023)."))


def test_the_question_words_a_header_says_alone_do_not_identify_the_fact():
    """The question names the speaker and the month, both of which only the message's header says:
    every fact of that speaker and day holds them with the date, so a memory holding them and the gold
    does not tell which fact it answers. A word of the message's own sentence does."""
    info = critical_information("The week before 27 June 2023", "When did Melanie go camping in June?",
                                CAMPED)
    assert not info.identified_by(tokenize("Melanie mentioned that good on you for going after what you "
                                           "really care about (27 June 2023)."))
    said = "[27 June 2023] Melanie: We went camping in the mountains. It was an awesome time!"
    camping = critical_information("27 June 2023", "When did Melanie go camping in June?", said)
    assert camping.identified_by(tokenize("Melanie went camping (27 June 2023)."))


PLANNED = ("[2:52 pm on 31 August, 2023] Tim: Thanks! Love experimenting with spices. By the way, have you "
           "been to Universal Studios? Planning a trip there next month [September 2023].")


def test_the_sentence_saying_a_date_gold_is_the_fact_not_one_only_its_header_dates():
    """The header's day belongs to every sentence of the message: the question's words single out the
    question Tim asks ("have you been to Universal Studios?"), but the sentence whose own words say the
    gold ("next month [September 2023]") states the fact. Memory that holds the day's year and the
    studio's name without the month does not carry it."""
    info = critical_information("September, 2023", "What month did Tim plan on going to Universal Studios?",
                                PLANNED)
    assert info.text.startswith("Planning a trip") and "september" in info.gold
    assert not info.carried_by(tokenize("Tim hasn't been to Universal Studios yet, but it's on his bucket "
                                        "list (31 August 2023)."))
    assert info.carried_by(tokenize("Tim is planning a trip to Universal Studios next month "
                                    "(September 2023)."))


# -- evidence without ids, located by content against paraphrased memories ---------------------------

TURNS = {
    "D1:1": "[8 May 2023] Caroline: I want to build a home where people feel welcome to learn and "
            "become who they are.",
    "D1:2": "[8 May 2023] Melanie: The park near us is a safe place for kids to grow and play.",
    "D1:3": "[8 May 2023] Melanie: My kids love the inviting playground there.",
    "D1:4": "[8 May 2023] Caroline: I painted a lake sunrise last year.",
}
EXTRACTED_FACTS = {  # what the extractor wrote from each turn: third person, in its own words
    "D1:1": "Caroline wants to create a safe and inviting place for people to grow.",
    "D1:2": "Melanie's kids play in a park near their home.",
    "D1:3": "Melanie's kids love the playground.",
    "D1:4": "Caroline painted a lake sunrise in 2022.",
}
VISION = "What kind of place does Caroline want to create for people?"
CORRECTION = "a safe and inviting place for people to grow"


def _vision_history(provider, signal: str = "correction"):  # type: ignore[no-untyped-def]
    from memtrace_otel import Category, MemoryTracer, VariableKind

    mt = MemoryTracer(provider, capture_content=True)
    ops: dict[str, str] = {}
    units = {}
    for dia_id, text in TURNS.items():
        with mt.operation("extract", Category.EXTRACTION, store_id="s") as op:
            message = op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
            facts = op.write(f"facts:{dia_id}", EXTRACTED_FACTS[dia_id], kind=VariableKind.FACTS)
            op.step("extract", [message], [facts])
        with mt.operation("create", Category.UPDATE, gen_ai_operation="create_memory", store_id="s") as op:
            op.read(facts)
            units[dia_id] = op.write(f"mem:{dia_id}", EXTRACTED_FACTS[dia_id], kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, VISION, [units["D1:2"], units["D1:3"]], "a park", CORRECTION, [], signal=signal)
    return ops


def test_evidence_without_ids_is_found_through_the_memory_that_says_the_correction(
        tracer_provider, span_exporter):
    """No message says 'a safe and inviting place for people to grow'; Melanie's park message shares
    more of its words than Caroline's turn does. The memory extracted from Caroline's turn says it:
    that turn is the evidence, and the search that missed its memory is to blame."""
    from memtrace_otel.attribution import ErrorType, FailureCase
    from memtrace_otel.attribution.evidence import find_evidence
    from memtrace_otel.attribution.lineage import LineageEngine
    from memtrace_otel.graph.build import build_graph
    from memtrace_otel.graph.query import failed_evaluations
    from memtrace_otel.spans.model import record_from_readable

    ops = _vision_history(tracer_provider)
    G = build_graph(record_from_readable(s) for s in span_exporter.get_finished_spans())
    case = FailureCase.from_graph(G, failed_evaluations(G)[0])
    assert case.evidence == [] and case.gold == CORRECTION
    found, given = find_evidence(G, case)
    assert not given and G.nodes[found[0]]["name"] == "msg:D1:1"
    verdict = LineageEngine().attribute(G, case)
    assert (verdict.operation, verdict.error_type) == (ops["search"], ErrorType.RETRIEVAL)


def test_a_line_with_the_whole_gold_and_all_the_question_asks_by_identifies_the_fact():
    """A long turn ('So much has happened since we last spoke - I went to ...') shares few words with the
    extracted fact, but the fact holds everything the question asks by and the whole gold."""
    said = readable("[12 July 2023] Caroline: So much has happened since we last spoke - I went to "
                    "an LGBTQ conference two days ago and it was really special.")
    info = critical_information("10 July 2023", "When did Caroline go to the LGBTQ conference?", said,
                                specific=lambda _tokens: False)
    assert info.identified_by(tokenize("Caroline attended an LGBTQ conference recently and felt accepted "
                                       "and supported, emphasizing trans rights (10 July 2023)."))
    assert not info.identified_by(tokenize("Caroline attended an LGBTQ conference recently (11 July 2023)."))
    assert not info.identified_by(tokenize("Caroline felt accepted at an LGBTQ event and spread awareness of "
                                           "trans rights (10 July 2023)."))



CHURCH = "What did Caroline make for a local church?"
CHURCH_SAID = ("[25 August 2023] Caroline: Thanks, Mel! I made this stained glass window to remind myself "
               "and others of our true potential. [shares a photo of three stained glass windows in a church "
               "with a clock]")
CHURCH_FACT = ("Caroline made a stained glass window to remind herself and others of their true potential "
               "(25 August 2023).")


def _church_history(provider):  # type: ignore[no-untyped-def]
    """Caroline's turn paraphrased into a fact that keeps the whole (common) gold but none of the caption
    the question points at ('church'), then a search that missed it."""
    from memtrace_otel import Category, MemoryTracer, VariableKind

    mt = MemoryTracer(provider, capture_content=True)
    ops: dict[str, str] = {}
    turns = {"D1:1": CHURCH_SAID,
             "D1:2": "[25 August 2023] Melanie: The museum had stained glass windows from old castles.",
             "D1:3": "[25 August 2023] Melanie: I made a painting of a lake sunrise last year.",
             # Others say the gold too, so it is common: it does not identify the fact on its own.
             "D1:4": "[25 August 2023] Melanie: My aunt restores stained glass windows for a living.",
             "D1:5": "[25 August 2023] Melanie: Stained glass windows fill a room with colour."}
    facts_of = {"D1:1": CHURCH_FACT,
                "D1:2": "Melanie saw stained glass windows from old castles at a museum (25 August 2023).",
                "D1:3": "Melanie made a painting of a lake sunrise in 2022 (25 August 2023).",
                "D1:4": "Melanie's aunt restores stained glass windows for a living (25 August 2023).",
                "D1:5": "Melanie likes how stained glass windows fill a room with colour (25 August 2023)."}
    units = {}
    for dia_id, text in turns.items():
        with mt.operation("extract", Category.EXTRACTION, store_id="s") as op:
            ops[f"extract {dia_id}"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
            message = op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
            facts = op.write(f"facts:{dia_id}", facts_of[dia_id], kind=VariableKind.FACTS)
            op.step("extract", [message], [facts])
        with mt.operation("create", Category.UPDATE, gen_ai_operation="create_memory", store_id="s") as op:
            op.read(facts)
            units[dia_id] = op.write(f"mem:{dia_id}", str(facts.content), kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, CHURCH, [units["D1:3"]], "a lake sunrise", "a stained glass window", ["D1:1"])
    return ops


def test_a_unit_written_from_the_evidence_restating_a_sentence_that_says_the_whole_gold_carries_it(
        tracer_provider, span_exporter):
    """The question's word ('church') singles out the photo caption; the fact the extractor kept is the
    other sentence, which says the gold as well. Written from the evidence, holding the whole gold and
    closer to that sentence than to any other, it carries the fact: the search that missed it is at fault."""
    from memtrace_otel.attribution import ErrorType

    ops = _church_history(tracer_provider)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["search"], ErrorType.RETRIEVAL)



HOBBY = "What hobby did Evan start practicing a few years ago that he enjoys?"


def _hobby_history(provider):  # type: ignore[no-untyped-def]
    """Sam asks about Evan's painting (the extractor keeps nothing of a question), Evan answers; an update
    later rewrites Evan's unit without the hobby, and the search reads the rewritten unit."""
    from memtrace_otel import Category, MemoryTracer, VariableKind

    mt = MemoryTracer(provider, capture_content=True)
    ops: dict[str, str] = {}
    turns = {"D1:1": ("[19 August 2023] Sam: You're good at drawing, why did you join a painting class?",
                      "Sam likes to chat in the evening (19 August 2023)."),
             "D1:2": ("[19 August 2023] Evan: I started watercolor painting a few years back, it calms me.",
                      "Evan started watercolor painting a few years back to calm down (19 August 2023).")}
    # Others mention painting too: the word is common and does not identify the fact on its own.
    for n, (who, said) in enumerate([("Sam", "My aunt sells painting supplies downtown."),
                                     ("Sam", "That painting of a lake looks peaceful."),
                                     ("Evan", "The museum had a painting by Monet.")], 3):
        fact = f"{who} mentioned that {said[0].lower()}{said[1:-1]} (19 August 2023)."
        turns[f"D1:{n}"] = (f"[19 August 2023] {who}: {said}", fact)
    units = {}
    for dia_id, (text, fact) in turns.items():
        with mt.operation("extract", Category.EXTRACTION, store_id="s") as op:
            ops[f"extract {dia_id}"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
            message = op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
            facts = op.write(f"facts:{dia_id}", fact, kind=VariableKind.FACTS)
            op.step("extract", [message], [facts])
        with mt.operation("create", Category.UPDATE, gen_ai_operation="create_memory", store_id="s") as op:
            op.read(facts)
            units[dia_id] = op.write(f"mem:{dia_id}", str(facts.content), kind=VariableKind.MEMORY_UNIT)
    with mt.operation("update", Category.UPDATE, gen_ai_operation="update_memory", store_id="s") as op:
        ops["update"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
        op.read(units["D1:2"])
        rewritten = op.write("mem:D1:2", "Evan goes for a drive to calm down (2 September 2023).",
                             kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, HOBBY, [rewritten], "driving", "Watercolor painting", ["D1:1", "D1:2"])
    return ops


def test_a_question_in_the_evidence_is_no_fact_its_extraction_dropped(tracer_provider, span_exporter):
    """Evidence that asks ('why did you join a painting class?') states nothing an extractor should keep:
    that its extraction kept none of it is no earlier fault than the update that overwrote the answer's
    unit."""
    from memtrace_otel.attribution import ErrorType

    ops = _hobby_history(tracer_provider)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["update"], ErrorType.UPDATE)


LEANING = "What would Caroline's political leaning likely be?"
HIKE = ("[17 August 2023] Caroline: Hey Mel! Recently, I had a not-so-great experience on a hike. I ran into "
        "a group of religious conservatives who said something that really upset me. It made me think how "
        "much work we still have to do for LGBTQ rights.")


def _turns_then_a_search_that_returned(  # type: ignore[no-untyped-def]
        mt, ops, turns, question, *, found, prediction, gold, evidence):
    """Each turn extracted as its fact and stored as a unit (``ops["extract <id>"]``); then the question's
    search returned the unit of turn ``found`` (``ops["search"]``), a wrong answer, a failed judgement."""
    from memtrace_otel import Category, VariableKind

    units = {}
    for dia_id, (text, fact) in turns.items():
        with mt.operation("extract", Category.EXTRACTION, store_id="s") as op:
            ops[f"extract {dia_id}"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
            message = op.read(f"msg:{dia_id}", content=text, kind=VariableKind.MESSAGE)
            facts = op.write(f"facts:{dia_id}", fact, kind=VariableKind.FACTS)
            op.step("extract", [message], [facts])
        with mt.operation("create", Category.UPDATE, gen_ai_operation="create_memory", store_id="s") as op:
            op.read(facts)
            units[dia_id] = op.write(f"mem:{dia_id}", str(facts.content), kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, question, [units[found]], prediction, gold, [evidence])
    return ops


def _leaning_history(provider, kept: str):  # type: ignore[no-untyped-def]
    """Caroline's hike turn (the gold 'Liberal' is an inference: none of its words are in the turn),
    extracted as ``kept``; a search that returned Melanie's unit instead."""
    from memtrace_otel import MemoryTracer

    mt = MemoryTracer(provider, capture_content=True)
    ops: dict[str, str] = {}
    turns = {"D1:1": (HIKE, kept),
             "D1:2": ("[17 August 2023] Melanie: I painted a lake sunrise last year.",
                      "Melanie painted a lake sunrise in 2022 (17 August 2023).")}
    return _turns_then_a_search_that_returned(mt, ops, turns, LEANING, found="D1:2",
                                              prediction="Conservative", gold="Liberal", evidence="D1:1")


def test_a_fact_written_from_the_evidence_carries_an_abstractive_gold_it_restates_in_part(
        tracer_provider, span_exporter):
    """None of the gold's words are in the turn, so the fact is the whole turn; the extractor kept one
    part of it in its own words (far under the share a copy of the turn holds). Written from the turn,
    keeping the speaker and its rare words, it is the extraction's result: the search that missed it
    is at fault."""
    from memtrace_otel.attribution import ErrorType

    ops = _leaning_history(tracer_provider, "Caroline was upset by religious conservatives she met on a "
                                            "hike (17 August 2023).")
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["search"], ErrorType.RETRIEVAL)


def test_a_fact_written_from_the_evidence_that_restates_none_of_it_does_not_carry_an_abstractive_gold(
        tracer_provider, span_exporter):
    """Written from the turn is not enough: a fact that keeps nothing of what the turn says but its date
    and speaker leaves the turn's content unstored, and its extraction is at fault."""
    from memtrace_otel.attribution import ErrorType

    ops = _leaning_history(tracer_provider, "Caroline turned 25 this year (17 August 2023).")
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["extract D1:1"], ErrorType.EXTRACTION)


ACTIVITIES = "What activities does Melanie do?"
CAPTION = "[8 May 2023] Melanie: [shares a photo of a painting of a sunset over a lake]"


def test_a_line_with_the_whole_gold_and_what_the_question_asks_by_answers_as_the_evidence_does():
    """The question asks about Melanie only: any statement of hers that says the gold answers it, though
    it shares nothing else with the photo caption (the presence test asks more of a gold as common as
    this one); another speaker's does not, nor a date gold."""
    info = critical_information("painting", ACTIVITIES, CAPTION, specific=lambda _tokens: False)
    painting = tokenize("Melanie loves painting landscapes and still life (25 August 2023).")
    assert info.answers(painting) and not info.carried_by(painting)
    assert not info.answers(tokenize("Caroline loves painting landscapes (25 August 2023)."))
    dated = critical_information("8 May 2023", "When did Melanie share a painting?", CAPTION)
    assert not dated.answers(tokenize("Melanie went swimming with her kids (8 May 2023)."))


def test_a_line_must_hold_all_of_the_gold_the_message_says_not_only_its_sentences_part():
    """'stories' is the chosen sentence's part of the gold; the message says 'resilience' and
    'inspiring' too, and a memory of another party's stories does not answer."""
    said = ("[17 July 2023] John: I heard some cool stories from an elderly veteran named Samuel. It was "
            "inspiring and heartbreaking, but seeing their resilience really filled me with hope.")
    info = critical_information("the resilience of the veterans and their inspiring stories",
                                "What does John appreciate about the veteran's hospital visit?", said)
    assert not info.answers(tokenize("John organized a party for veterans to share their stories."))
    assert info.answers(tokenize("John found the stories of the veterans inspiring and admired their "
                                 "resilience."))


def _activities_history(provider):  # type: ignore[no-untyped-def]
    """Melanie said she loves painting (stored); later her photo of a painting is extracted as nothing
    of it, and the question's search returns another memory."""
    from memtrace_otel import MemoryTracer

    mt = MemoryTracer(provider, capture_content=True)
    ops: dict[str, str] = {}
    turns = {"D1:1": ("[1 May 2023] Melanie: Painting landscapes and still life is what I love most.",
                      "Melanie loves painting landscapes and still life (1 May 2023)."),
             "D1:2": ("[2 May 2023] Caroline: I went to a support group yesterday.",
                      "Caroline attended a support group (1 May 2023)."),
             "D2:1": (CAPTION, "Melanie shared a photo (8 May 2023).")}
    # Others mention painting too: the word is common and does not identify the fact on its own.
    for n, said in enumerate(["My aunt sells painting supplies downtown.", "That painting of a lake looks "
                              "peaceful.", "The museum had a painting by Monet."], 3):
        turns[f"D1:{n}"] = (f"[2 May 2023] Caroline: {said}",
                            f"Caroline mentioned that {said[0].lower()}{said[1:-1]} (2 May 2023).")
    return _turns_then_a_search_that_returned(mt, ops, turns, ACTIVITIES, found="D1:2",
                                              prediction="support groups", gold="painting", evidence="D2:1")


def test_a_memory_of_another_turn_that_answers_as_the_evidence_does_makes_a_miss_the_searchs(
        tracer_provider, span_exporter):
    """The photo's extraction kept nothing of it, but Melanie's painting was in memory already (an earlier
    turn's fact, which shares no words with the caption but the gold and her name): nothing was lost on the
    write side, and the search that missed it is at fault."""
    from memtrace_otel.attribution import ErrorType

    ops = _activities_history(tracer_provider)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["search"], ErrorType.RETRIEVAL)


PARK = "How often does John take his kids to the park?"
OFTEN = "[6 March 2023] John: Yeah, we go a few times a week."


def test_common_gold_words_carry_a_fact_only_said_together():
    """'time' and 'week' are in most messages: a line holding both apart ('last week ... a tough time')
    does not say 'a few times a week'; said together, or when one of them is rare, it may."""
    common = critical_information("A few times a week", PARK, OFTEN, specific=lambda _tokens: False)
    rare = critical_information("A few times a week", PARK, OFTEN, specific=lambda _tokens: True)
    apart = "Maria's grandma passed away last week, causing her to go through a tough time."
    assert common.spread and not common.together(apart)
    assert common.together("John takes the kids out several times each week.")
    assert not rare.spread and rare.together(apart)
    # A date's numbers and months come from a record's header, far from the words of its fact.
    dated = critical_information("The week before 9 June 2023", "When did Caroline speak at a school?",
                                 "[9 June 2023] Caroline: I spoke at a school last week [the week before 9 "
                                 "June 2023].", specific=lambda _tokens: False)
    assert not dated.spread


def _park_history(provider, stated: bool = False) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Maria's and John's turns cut into one memcell, written into an episode that says Maria's 'last week'
    and 'a tough time' but drops John's 'a few times a week'; other turns use 'time' and 'week' apart
    (common words), and the reader gets the episode. With ``stated``, the turns are first stored as a
    memcell of raw messages that the extraction rewrites into the episode (EverMemOS)."""
    from memtrace_otel import Category, MemoryTracer, VariableKind

    mt = MemoryTracer(provider, capture_content=True)
    ops: dict[str, str] = {}
    chatter = ["[1 March 2023] Maria: What a week at the shelter.", "[1 March 2023] John: Busy week for me.",
               "[2 March 2023] Maria: A week of rain.", "[2 March 2023] John: I had time to read.",
               "[3 March 2023] Maria: No time to rest.", "[3 March 2023] John: Time flies.",
               "[4 March 2023] Maria: One more week to go."]
    with mt.operation("ingest", Category.INGEST, store_id="s") as op:
        for i, text in enumerate(chatter):
            op.read(f"msg:D0:{i}", content=text, kind=VariableKind.MESSAGE)
        op.write("mem:chatter", "Maria and John talked about their weeks.", kind=VariableKind.MEMORY_UNIT)
    grief = "[6 March 2023] Maria: Last week my grandma passed away, it's a tough time."
    episode = ("[6 March 2023] Maria's grandma passed away last week, causing her to go through a tough "
               "time. John had a picnic with his wife and kids.")
    if stated:  # a memcell holding the messages (records naming their speakers), rewritten into its episode
        said = [("msg:D8:7", "Maria", "Last week my grandma passed away, it's a tough time."),
                ("msg:D8:8", "John", "Yeah, we go a few times a week.")]
        with mt.operation("finalize", Category.INGEST, store_id="s") as op:
            records = [{"content": text, "name": who, "timestamp": "2023-03-06T18:03:00"}
                       for _, who, text in said]
            for (key, _, _), record in zip(said, records, strict=True):
                op.read(key, content=json.dumps(record), kind=VariableKind.MESSAGE)
            cell = op.write("mem:episode", json.dumps({"original_data": records}),
                            kind=VariableKind.MEMORY_UNIT)
    with mt.operation("extract_memory", Category.EXTRACTION, store_id="s") as op:
        ops["extract"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
        if stated:
            op.read(cell)
            unit = op.update(cell, episode)
        else:
            op.read("msg:D8:7", content=grief, kind=VariableKind.MESSAGE)
            op.read("msg:D8:8", content=OFTEN, kind=VariableKind.MESSAGE)
            unit = op.write("mem:episode", episode, kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, PARK, [unit], "I don't know.", "A few times a week", ["D8:8"])
    return ops


def test_an_episode_with_common_gold_words_apart_did_not_keep_the_fact(tracer_provider, span_exporter):
    """The episode written from the evidence holds 'week' and 'time' in Maria's sentence only: the reader
    never had how often John goes, and the extraction that dropped it is the fault, not the reader."""
    from memtrace_otel.attribution import ErrorType

    ops = _park_history(tracer_provider)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["extract"], ErrorType.EXTRACTION)


def test_a_statement_with_common_gold_words_apart_does_not_say_the_gold(tracer_provider, span_exporter):
    """The extraction's statement, followed into memory and the reader's context, holds 'week' and 'time'
    apart: it does not say how often John goes, so the reader did not have the answer and the
    extraction that dropped it is the fault."""
    from memtrace_otel.attribution import ErrorType

    ops = _park_history(tracer_provider, stated=True)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["extract"], ErrorType.EXTRACTION)


def _carrying_of(exporter, question: str, gold: str, evidence: str, *, semantic=None):  # type: ignore[no-untyped-def]
    """The :class:`Carrying` of the one failed evaluation's evidence ``evidence`` (a message id)."""
    from memtrace_otel.attribution import FailureCase
    from memtrace_otel.attribution.carrying import Carrying, LineageCase
    from memtrace_otel.attribution.graph_index import graph_index
    from memtrace_otel.graph.build import build_graph
    from memtrace_otel.graph.query import failed_evaluations
    from memtrace_otel.spans.model import record_from_readable

    G = build_graph(record_from_readable(s) for s in exporter.get_finished_spans())
    failure = FailureCase.from_graph(G, failed_evaluations(G)[0])
    index = graph_index(G)
    case = LineageCase.of(index, failure.answer, index.producer(failure.answer), semantic=semantic)
    message = next(n for n in G if n.startswith(f"msg:{evidence}@") or f"/msg:{evidence}@" in n)
    info = critical_information(gold, question, index.text(message), idf=index.idf, specific=index.specific)
    return Carrying(case, message, info, structural=False), G


def _history(provider, messages: dict[str, str], units: dict[str, str], question: str,  # type: ignore[no-untyped-def]
             gold: str, evidence: str) -> None:
    """Each message ingested into its unit (same key), every unit returned to a reader that failed."""
    from memtrace_otel import Category, MemoryTracer, VariableKind

    mt = MemoryTracer(provider, capture_content=True)
    written = []
    for key, text in messages.items():
        with mt.operation("add", Category.EXTRACTION, store_id="s") as op:
            op.read(f"msg:{key}", content=text, kind=VariableKind.MESSAGE)
            if key in units:
                written.append(op.write(f"mem:{key}", units[key], kind=VariableKind.MEMORY_UNIT))
    _ask(mt, {}, question, written, "I don't know.", gold, [evidence])


def test_a_paraphrase_keeping_only_a_common_name_of_the_gold_does_not_carry_it(
        tracer_provider, span_exporter):
    """Half the gold by weight was its name 'LGBTQ', in most messages: a statement close in meaning (here
    every statement is, by a stub embedding) that keeps only that name is about the same subject, not
    the fact 'visited an LGBTQ center'; one keeping the rare words carries it."""
    import numpy as np

    question, gold = "What inspired Caroline's painting?", "visiting an LGBTQ center"
    messages = {f"D{i}": f"[{i} May 2023] Caroline: The LGBTQ group met again, talk {i}."
                for i in range(1, 9)}
    messages["D9"] = "[10 May 2023] Caroline: I painted this after I visited a LGBTQ center."
    messages["D10"] = "[11 May 2023] Caroline: I will show my LGBTQ paintings at an art show."
    units = {"D9": "Caroline painted a picture after she visited an LGBTQ center.",
             "D10": "Caroline is organizing an LGBTQ art show of her paintings."}
    _history(tracer_provider, messages, units, question, gold, "D9")
    carries, G = _carrying_of(span_exporter, question, gold, "D9",
                              semantic=lambda texts: np.ones((len(texts), 1)))
    unit = {G.nodes[n].get("name"): n for n in G if G.nodes[n].get("name", "").startswith("mem:")}
    assert carries._paraphrases(unit["mem:D9"]) and not carries._paraphrases(unit["mem:D10"])


def test_a_paraphrase_that_lost_a_name_of_the_gold_the_message_said_does_not_carry_it(
        tracer_provider, span_exporter):
    """A lossy fact keeps most of the gold but drops the name the message said ('a small town' for 'a
    small Midwestern town'): close in meaning (here every statement is, by a stub embedding) and half the
    gold, it is still no paraphrase of the fact, since no other words say a name. The fact that keeps the
    name carries it, and so does one rewording the rest around the name."""
    import numpy as np

    question = "What project is Joanna working on in her notebook?"
    gold = "A suspenseful thriller set in a small Midwestern town"
    messages = {f"D{i}": f"[{i} May 2022] Joanna: Writing in my notebook again today, part {i}."
                for i in range(1, 5)}
    messages["D5"] = ("[9 November 2022] Joanna: Hey Nate, I'm working on a new project - a suspenseful "
                      "thriller set in a small Midwestern town.")
    units = {"D1": "Joanna is working on a new project - a suspenseful thriller set in a small town.",
             "D2": "Joanna is working on a project - a suspenseful thriller set in a small Midwestern town.",
             "D3": "Joanna is writing a thriller full of suspense about a Midwestern town."}
    _history(tracer_provider, messages, units, question, gold, "D5")
    carries, G = _carrying_of(span_exporter, question, gold, "D5",
                              semantic=lambda texts: np.ones((len(texts), 1)))
    unit = {G.nodes[n].get("name"): n for n in G if G.nodes[n].get("name", "").startswith("mem:")}
    assert not carries._paraphrases(unit["mem:D1"])
    assert carries._paraphrases(unit["mem:D2"]) and carries._paraphrases(unit["mem:D3"])


def test_a_statement_of_someone_else_does_not_answer_for_the_speaker_a_record_names(
        tracer_provider, span_exporter):
    """The message names its speaker only in its record: 'Tim feels great reading' holds the gold and every
    word the question asks by but 'John', and answers another question."""
    import json

    question, gold = "How does John feel about being a mentor?", "It feels great"
    said = json.dumps({"content": "It feels great to have their trust.", "name": "John"})
    messages = {"D1": said,
                "D2": json.dumps({"content": "Reading fantasy makes me feel great.", "name": "Tim"})}
    units = {"D1": "John feels great mentoring younger players.",
             "D2": "Tim feels great reading fantasy books."}
    _history(tracer_provider, messages, units, question, gold, "D1")
    carries, G = _carrying_of(span_exporter, question, gold, "D1")
    unit = {G.nodes[n].get("name"): n for n in G if G.nodes[n].get("name", "").startswith("mem:")}
    assert not carries._answers(unit["mem:D2"])
    assert carries.info.answers(carries.case.index.tokens(unit["mem:D2"]))  # the words alone would
    assert carries._answers(unit["mem:D1"])


def _metadata_history(provider) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """MemBase's Mem0: each message with its metadata block appended, facts extracted (none from John's turn
    about Anthony), then stored by a decision; the question's search returns only Tim's memory."""
    import json

    from memtrace_otel import Category, MemoryTracer, VariableKind

    question, gold = "Who is Anthony?", "likely John's friend, colleague or family"
    metadata = "\nBelow is this message's metadata:\nSpeaker Name: {0}\nSpeaker Role: user\n"
    turns = {"D1": ("John", "2023-08-02T16:17:00", "Anthony and I went to this charity thing and ended up "
                    "in an intense trivia contest. We did alright.", None),
             "D2": ("John", "2023-08-02T16:20:00", "I'm reading an inspiring book.",
                    "John is reading an inspiring book."),
             "D3": ("Tim", "2023-08-02T16:21:00", "I went to the UK.", "Tim went to the UK.")}
    mt = MemoryTracer(provider, capture_content=True)
    ops, units = {}, {}
    for key, (who, when, said, fact) in turns.items():
        record = {"content": said + metadata.format(who), "name": who, "timestamp": when}
        with mt.operation("extract", Category.EXTRACTION, store_id="s") as op:
            ops[key] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
            message = op.read(f"msg:{key}", content=json.dumps(record), kind=VariableKind.MESSAGE)
            facts = op.write(f"facts:{key}", json.dumps([fact] if fact else []), kind=VariableKind.FACTS)
            op.step("extract", [message], [facts])
        if fact:
            with mt.operation("create", Category.UPDATE, gen_ai_operation="create_memory",
                              store_id="s") as op:
                op.read(facts)
                units[key] = op.write(f"mem:{key}", json.dumps({"memory": fact, "timestamp": when}),
                                      kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, question, [units["D3"]], "I don't know.", gold, ["D1"])
    return ops


def test_a_line_naming_only_the_speaker_is_no_fact_of_the_message(tracer_provider, span_exporter):
    """MemBase's Mem0 appends the message's metadata to what was said ('Speaker Name: John'). That line holds
    the gold's one word the message has ('John' of "likely John's friend") and would be the fact: every
    memory naming John would carry it, and the search that missed one be blamed. It names who spoke; the
    fact is what John said, which the extraction (it stored nothing) dropped."""
    from memtrace_otel.attribution import ErrorType

    question, gold = "Who is Anthony?", "likely John's friend, colleague or family"
    text = readable(json.dumps({"content": "Anthony and I went to a contest.\nBelow is this message's "
                                "metadata:\nSpeaker Name: John\n", "name": "John"}))
    assert critical_information(gold, question, text).text == "John"  # what the metadata line made the fact
    assert "Anthony" in critical_information(gold, question, text, speaker="John").text
    ops = _metadata_history(tracer_provider)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["D1"], ErrorType.EXTRACTION)


def test_another_speakers_line_says_it_of_the_person_asked_about_only_by_naming_them(
        tracer_provider, span_exporter):
    """Messages name their speakers only in their records. A context line quoting Jolene's 'My mother also
    passed away a few years ago' holds the gold's words and most of Deborah's sentence, but it is Jolene's
    mother: it does not answer when Deborah's mother died."""
    question, gold = "When did Deborah's mother pass away?", "a few years before 2023"

    def said(who: str, text: str) -> str:
        return json.dumps({"content": text, "name": who, "timestamp": "2023-01-23T16:06:00"})

    theirs = "Sorry about your loss. My mother also passed away a few years ago."
    messages = {"D1": said("Deborah", "It was full of memories, she passed away a few years ago."),
                "D2": said("Jolene", theirs)}
    _history(tracer_provider, messages, {"D2": f"[23 January 2023] {theirs}"}, question, gold, "D1")
    carries, G = _carrying_of(span_exporter, question, gold, "D1")
    unit = {G.nodes[n].get("name"): n for n in G if G.nodes[n].get("name", "").startswith("mem:")}
    tokens = carries.case.index.tokens(unit["mem:D2"])
    assert carries.info.carried_by_lines(tokens, [tokens])  # the words alone would
    assert not carries._carried_by_lines(unit["mem:D2"])


def _tournament_history(provider, later: bool = False) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """John's March turn about a convention's tournament, stored whole; his May turn about the tournament he
    organised, extracted without it; with ``later``, an August turn about the tournaments he wants to
    organise, whose extraction read the May unit (as mem0's reads the similar memories); the question's
    search returns only the May unit."""
    import json

    from memtrace_otel import Category, MemoryTracer, VariableKind

    question = "What did John organize with his friends on May 8, 2022?"
    mt = MemoryTracer(provider, capture_content=True)
    turns = {"D1": ("2022-03-27T10:00:00", "I took part in a tournament for CS:GO at a gaming convention!",
                    "John took part in a tournament for CS:GO at a gaming convention."),
             "D2": ("2022-05-08T00:45:00", "We put together a tournament for our favorite game, CS:GO.",
                    "John talked about organized game friends.")}
    if later:
        turns["D3"] = ("2022-08-06T13:45:00", "I want to organize tournaments for CS:GO and Fortnite.",
                       "John wants to organize tournaments for CS:GO and Fortnite.")
    ops, units = {}, {}
    for key, (when, said, fact) in turns.items():
        with mt.operation("add", Category.EXTRACTION, store_id="s") as op:
            ops[key] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
            op.read(f"msg:{key}", content=json.dumps({"content": said, "name": "John", "timestamp": when}),
                    kind=VariableKind.MESSAGE)
            if key == "D3":
                op.read(units["D2"])
            units[key] = op.write(f"mem:{key}", json.dumps({"memory": fact, "timestamp": when}),
                                  kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, question, [units["D2"]], "I don't know.", "A tournament for CS:GO", ["D2"])
    return ops


def test_a_memory_dated_away_from_the_month_the_question_names_tells_another_event(
        tracer_provider, span_exporter):
    """The question asks what John organised in May 2022; a March memory of a CS:GO tournament holds the
    whole gold but is another event: it is no memory of the May fact the search missed, and the May turn's
    extraction, which kept none of it, is the fault."""
    from memtrace_otel.attribution import ErrorType

    ops = _tournament_history(tracer_provider)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["D2"], ErrorType.EXTRACTION)


def test_a_later_memory_tied_to_the_evidence_but_dated_another_month_tells_another_event(
        tracer_provider, span_exporter):
    """The August memory of the tournaments John wants to organise was written by an extraction that read
    the May unit (tied to the evidence, not written from it): dated away from May, it is another event,
    not a May fact alive in memory that the search missed; the May turn's extraction is the fault."""
    from memtrace_otel.attribution import ErrorType

    ops = _tournament_history(tracer_provider, later=True)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["D2"], ErrorType.EXTRACTION)


def _adoption_history(provider) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Nate's turn about his new dog Max, stored whole; five days later a turn whose add read that unit (as
    mem0's update decision reads the similar memories), wrote a unit about walking Max and deleted the first
    one; the question's search returns the walking unit."""
    from memtrace_otel import Category, MemoryTracer, VariableKind

    mt = MemoryTracer(provider, capture_content=True)
    turns = {"D1": ("[7:49 pm on 20 May, 2022] Nate: Way to go! I just got a new addition to the family, "
                    "this is Max!",
                    "Nate has a new addition to the family, an adopted pet named Max (20 May 2022)."),
             "D2": ("[1:14 pm on 25 May, 2022] Nate: Max and I had a great walk by the river this morning.",
                    "Nate has a dog named Max that he enjoys taking for walks (25 May 2022).")}
    ops, units = {}, {}
    for key, (said, fact) in turns.items():
        with mt.operation("add", Category.EXTRACTION, store_id="s") as op:
            op.read(f"msg:{key}", content=said, kind=VariableKind.MESSAGE)
            if key == "D2":
                op.read(units["D1"])
            units[key] = op.write(f"mem:{key}", fact, kind=VariableKind.MEMORY_UNIT)
        if key == "D2":
            with mt.operation("delete", Category.DELETION, gen_ai_operation="delete_memory",
                              store_id="s") as op:
                ops["delete"] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
                op.delete(units["D1"])
    _ask(mt, ops, "When did Nate adopt Max?", [units["D2"]],
         "Nate has a dog named Max that he enjoys taking for walks", "May 2022", ["D1"])
    return ops


def test_a_memory_of_another_day_tied_to_the_evidence_by_the_decisions_read_does_not_carry_its_date(
        tracer_provider, span_exporter):
    """The walking unit was written from the later turn; it descends from the evidence only because that
    turn's add read the adoption unit. Dated five days later, it holds "May 2022" as every unit of its day
    does, not as the adoption's date: the deletion of the adoption unit lost the fact, not the reader."""
    from memtrace_otel.attribution import ErrorType

    ops = _adoption_history(tracer_provider)
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["delete"], ErrorType.DELETION)


CHECKUPS = "How often does Sam get health checkups?"
CHECKUP = ("[3:09 pm on 8 October, 2023] Sam: I went for a check-up Monday and my doc said my weight's a "
           "serious health risk.")


def test_a_header_clock_time_is_not_a_number_the_message_says():
    """Sent at 3:09 pm: the header's hour is when, not what; 'every three months' is none of the turn's
    words, while a number its body says still is one."""
    assert not critical_information("every three months", CHECKUPS, CHECKUP).gold
    said = CHECKUP.replace("Monday", "Monday, as every 3 months,")
    assert "3" in critical_information("every three months", CHECKUPS, said).gold


def test_a_gold_number_only_in_the_header_clock_leaves_the_extraction_blameless(
        tracer_provider, span_exporter):
    """The turn does not say the gold (an inference, 'every three months'); the extractor restated it and
    the search returned another turn's unit: the search is at fault, not an extraction said to have
    dropped the '3' of '3:09 pm'."""
    from memtrace_otel import MemoryTracer
    from memtrace_otel.attribution import ErrorType

    mt = MemoryTracer(tracer_provider, capture_content=True)
    ops: dict[str, str] = {}
    turns = {"D1:1": (CHECKUP, "Sam's doctor said at a check-up that his weight is a serious health risk "
                               "(8 October 2023)."),
             "D1:2": ("[3:12 pm on 8 October, 2023] Evan: I painted a lake sunrise last year.",
                      "Evan painted a lake sunrise in 2022 (8 October 2023).")}
    ops = _turns_then_a_search_that_returned(mt, ops, turns, CHECKUPS, found="D1:2", prediction="Yearly",
                                             gold="every three months", evidence="D1:1")
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["search"], ErrorType.RETRIEVAL)


def test_a_line_naming_only_who_is_asked_about_is_no_other_memory_stating_the_gold(
        tracer_provider, span_exporter):
    """MemBase's Mem0 names the speaker only in the message's record. The extraction of Tim's turn about
    starting the piano wrote only that he "talked about learning"; another turn's memory, "Tim's favorite
    song to play on the piano ...", holds both gold words and, of the question's words, only his name. It
    answers another question (what he plays), not what he started learning: memory never held the fact,
    and the extraction that dropped it is the fault, not the search that passed over that memory."""
    from memtrace_otel import Category, MemoryTracer, VariableKind
    from memtrace_otel.attribution import ErrorType

    question, gold = "What new activity has Tim started learning in August 2023?", "play the piano"
    turns = {"D1": ("2023-08-21T10:00:00", "I've also started learning how to play the piano - it's a "
                    "learning curve, but it's so satisfying seeing the progress I make!",
                    "Tim talked about learning finds satisfying."),
             "D2": ("2023-08-21T10:05:00", "My favorite song to play on the piano is the Harry Potter theme.",
                    "Tim's favorite song to play on the piano is the Harry Potter theme."),
             "D3": ("2023-08-21T10:06:00", "I read a bunch of fantasy books for school.",
                    "Tim reads fantasy books for school.")}
    mt = MemoryTracer(tracer_provider, capture_content=True)
    ops: dict[str, str] = {}
    units = {}
    for key, (when, said, fact) in turns.items():
        record = {"content": said + "\nBelow is this message's metadata:\nSpeaker Name: Tim\n", "name": "Tim",
                  "timestamp": when}
        with mt.operation("extract", Category.EXTRACTION, store_id="s") as op:
            ops[key] = f"op:{op.span_context.trace_id:032x}:{op.span_context.span_id:016x}"
            message = op.read(f"msg:{key}", content=json.dumps(record), kind=VariableKind.MESSAGE)
            facts = op.write(f"facts:{key}", json.dumps([fact]), kind=VariableKind.FACTS)
            op.step("extract", [message], [facts])
        if key == "D1":
            continue  # the decision found nothing to store in a fact this vague
        with mt.operation("create", Category.UPDATE, gen_ai_operation="create_memory", store_id="s") as op:
            op.read(facts)
            units[key] = op.write(f"mem:{key}", json.dumps({"memory": fact, "timestamp": when}),
                                  kind=VariableKind.MEMORY_UNIT)
    _ask(mt, ops, question, [units["D3"]], "I don't know.", gold, ["D1"])
    verdict = _walk_verdict(span_exporter)
    assert (verdict.operation, verdict.error_type) == (ops["D1"], ErrorType.EXTRACTION)



def test_a_cases_read_side_is_its_slices_operations_from_the_question_on_in_execution_order(
        tracer_provider, span_exporter):
    # The per-case lists stand in for scans of the whole slice: they must hold what the scans found.
    from memtrace_otel.graph.node_types import OPERATION
    from memtrace_otel.semconv import Category

    _history(tracer_provider, {"d1": "Caroline went to a LGBTQ support group.", "d2": "Mel painted a lake."},
             {"d1": "Caroline attended a support group", "d2": "Mel painted a lake"},
             "What did Caroline attend?", "LGBTQ support group", "d1")
    carries, _ = _carrying_of(span_exporter, "What did Caroline attend?", "LGBTQ support group", "d1")
    case, index = carries.case, carries.case.index
    operations = {n for n in case.answer_slice if index.data(n).get("type") == OPERATION}
    assert set(case.operations()) == operations and len(case.operations()) == len(operations)
    later = [op for op in operations if index.order(op) >= case.query_time]
    assert case.read_side() == sorted(later, key=index.order)
    assert case.generator in case.read_side()
    assert any(index.category(op) == Category.RETRIEVAL for op in case.read_side())
    assert not any(index.category(op) == Category.EXTRACTION for op in case.read_side())


def test_a_unit_writing_a_word_without_its_accents_or_a_number_in_digits_carries_the_gold():
    """An extractor writes "Cafe" for the turn's "Café" and "25" for its "twenty-five" (or the other way):
    the presence test reads them as the same words; a different number is still another fact."""
    said = "[8 May 2023] John: We met at Café Landtmann, I've been going there for twenty-five years."
    place = critical_information("Café Landtmann", "Where did John meet his friend?", said)
    assert place.carried_by(tokenize("John met his friend at Cafe Landtmann (8 May 2023)."))
    assert not place.carried_by(tokenize("John met his friend at a cafe (8 May 2023)."))
    years = critical_information("25 years", "How long has John been going to Café Landtmann?", said)
    assert years.carried_by(tokenize("John has been going to Cafe Landtmann for 25 years (8 May 2023)."))
    assert not years.carried_by(tokenize("John has been going to Café Landtmann for twenty-four years."))
    assert tokenize("the twenty-first of May") == tokenize("the 21st of May")


def test_words_in_any_script_are_tokens():
    """A name written in another script is a word the gold and a unit share, not nothing: a unit without
    it does not carry the gold."""
    said = "[8 May 2023] Anna: I moved to Москва last year."
    info = critical_information("Москва", "Where does Anna live?", said)
    assert info.carried_by(tokenize("Anna moved to Москва (8 May 2023)."))
    assert not info.carried_by(tokenize("Anna moved to Berlin (8 May 2023)."))


def test_the_benchmarks_tokenizer_is_left_as_it_was():
    """The reference systems and the real-mem0 labeller tokenise without ``fold``: their labels are pinned
    (``memtrace bench build`` writes the same labels for the same seed), so accents, scripts and spelled
    numbers are the presence test's alone."""
    from memtrace_otel.text import fact_tokens

    assert fact_tokens("Café, twenty-five") != fact_tokens("Cafe, 25")
    assert fact_tokens("Café, twenty-five", fold=True) == fact_tokens("Cafe, 25", fold=True)


def test_a_memo_of_line_verdicts_answers_as_the_lines_themselves_do():
    """The presence test keeps each line's verdict across the versions of a window (``memo``): a line
    decided once is not decided again, and every answer is the one the lines give without it."""
    info = critical_information("a rainbow sidewalk", WALK, SAID, specific=lambda _tokens: True)
    said, other = tokenize(SAID), tokenize("[26 August 2023] Melanie: We went camping by the lake.")
    memo: dict[frozenset[str], bool] = {}
    for lines in ([other], [other, said], [said], [other]):
        tokens = frozenset().union(*lines)
        assert info.carried_by_lines(tokens, lines, memo=memo) == info.carried_by_lines(tokens, lines)
    assert memo == {other: False, said: True}
    assert info.states(said) and not info.states(other)


CAMPING = "[26 August 2023] Melanie: We went camping by the lake with the kids."
PRIDE = "[27 August 2023] Melanie: That rainbow sidewalk you came across sounds lovely for Pride Month."
NOTE = "[25 August 2023] Caroline went for a walk in her neighborhood."


def _window_versions(provider, windows: list[list[str]]) -> None:  # type: ignore[no-untyped-def]
    """Caroline's walk turn and Melanie's two turns, each read as a message, then one window of raw
    messages written once per entry of ``windows`` (its lines), and a search returning the last version
    to a reader that failed the walk question."""
    from memtrace_otel import Category, MemoryTracer, VariableKind

    mt = MemoryTracer(provider, capture_content=True)
    with mt.operation("ingest", Category.INGEST, store_id="s") as op:
        for key, text in (("D1:1", SAID), ("D1:2", CAMPING), ("D1:3", PRIDE)):
            op.read(f"msg:{key}", content=text, kind=VariableKind.MESSAGE)
    window = None
    for lines in windows:
        with mt.operation("append", Category.INGEST, store_id="s") as op:
            if window is not None:
                op.read(window)
            window = op.write("window", "\n".join(lines), kind=VariableKind.MEMORY_UNIT)
    _ask(mt, {}, WALK, [window], "I don't know.", "a rainbow sidewalk", ["D1:1"])


def _version_verdicts(carries, G, order: list[int]) -> dict[int, bool]:  # type: ignore[no-untyped-def]
    versions = sorted((n for n in G if G.nodes[n].get("name") == "window"),
                      key=lambda n: G.nodes[n]["version"])
    return {i: carries._carried_by_lines(versions[i]) for i in order}


def test_a_line_decided_once_per_evidence_decides_each_window_version_by_the_lines_it_holds(
        tracer_provider, span_exporter):
    """The presence test sorts each distinct line of a window once per evidence message and decides a
    version by the lines it holds: a version that dropped the evidence's line no longer carries it,
    though it holds the gold (on Melanie's turn) and Caroline's name (on a note) and its lines were
    sorted with a version that did, and the verdicts do not depend on the order the versions are tested
    in."""
    windows = [[CAMPING], [CAMPING, SAID], [SAID, PRIDE], [NOTE, PRIDE], [SAID]]
    _window_versions(tracer_provider, windows)
    forward, G = _carrying_of(span_exporter, WALK, "a rainbow sidewalk", "D1:1")
    backward, _ = _carrying_of(span_exporter, WALK, "a rainbow sidewalk", "D1:1")
    expected = {0: False, 1: True, 2: True, 3: False, 4: True}
    assert _version_verdicts(forward, G, [0, 1, 2, 3, 4]) == expected
    assert _version_verdicts(backward, G, [4, 3, 2, 1, 0]) == expected


def test_a_whole_message_fact_is_read_across_a_versions_own_lines_not_another_messages(
        tracer_provider, span_exporter):
    """A fact that is a whole message may stand on several lines of a text, but not on a line quoting
    another message word for word: a version whose gold words are on Caroline's note and a line of its
    own carries it, with or without another message's turn beside them; the version where they stand
    only on Melanie's quoted turn does not, though it holds the same words. In either order."""
    from dataclasses import replace

    sidewalk = "A rainbow sidewalk."
    _window_versions(tracer_provider, [[NOTE, sidewalk], [NOTE, PRIDE], [CAMPING, sidewalk, NOTE]])
    carries, G = _carrying_of(span_exporter, WALK, "a rainbow sidewalk", "D1:1")

    def whole():  # type: ignore[no-untyped-def]
        info = replace(carries.info, whole=True)
        return type(carries)(carries.case, carries.evidence, info, structural=False)

    expected = {0: True, 1: False, 2: True}
    assert _version_verdicts(whole(), G, [0, 1, 2]) == expected
    assert _version_verdicts(whole(), G, [2, 1, 0]) == expected
    assert not any(_version_verdicts(carries, G, [0, 1, 2]).values())  # no one line states the fact


def test_the_first_letter_lookaheads_of_the_text_patterns_skip_no_match():
    """The spelled-number and relative-time patterns look ahead for the first character of one of their
    alternatives before trying them (a speed-up): each alternative, in either case, still matches."""
    import re

    from memtrace_otel import text

    spelled = [*text._TENS, *text._TEENS, *(f"{w[:-1]}ieth" for w in text._TENS),
               *(f"{w}th" for w in text._TEENS),
               *(f"{tens}-{unit}" for tens in text._TENS for unit in text._UNITS + text._UNIT_ORDINALS)]
    relative = ["yesterday", "today", "tonight", "tomorrow",
                *(f"{side} {unit}" for side in ("last", "next", "this")
                  for unit in ("week", "weekend", "month", "year", *text._WEEKDAY_NAMES)),
                *(f"{amount} {unit}s ago" for amount in ("3", "a", "an", *text._AMOUNTS, "a few", "few")
                  for unit in ("day", "week", "month", "year"))]
    for pattern, phrases in ((text._SPELLED_NUMBER, spelled), (text._RELATIVE, relative)):
        plain = re.compile(re.sub(r"^\\b\(\?=\[[^\]]*\]\)", r"\\b", pattern.pattern), pattern.flags)
        assert plain.pattern != pattern.pattern
        for phrase in phrases:
            for said in (phrase, phrase.upper(), phrase.capitalize()):
                line = f"Ann said {said}, then left."
                found = [m.group(0) for m in pattern.finditer(line)]
                assert found == [m.group(0) for m in plain.finditer(line)] and found, said
