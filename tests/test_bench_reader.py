"""The offline reader (memtrace_bench.systems.reader): which sentence it reads, what it answers."""

from __future__ import annotations

from memtrace_bench.systems.answer_phrase import Doc, analysed, parse_question, phrase
from memtrace_bench.systems.interfaces import ContextItem, Sentence
from memtrace_bench.systems.offline import ExtractiveAnswerer as OfflineReader
from memtrace_bench.systems.reader import ExtractiveAnswerer
from memtrace_otel.text import token_f1


def _turn(dia_id: str, speaker: str, date: str, *texts: str) -> ContextItem:
    return ContextItem(f"u:{dia_id}", [Sentence(dia_id, speaker, date, t) for t in texts])


def _chat() -> list[ContextItem]:
    return [
        _turn("D1:1", "Joanna", "7 November 2022", "That makes sense!",
              "So what's your favorite game?"),
        _turn("D1:2", "Nate", "7 November 2022", "Yep!",
              'I\'m currently playing this fantasy RPG called "Xenoblade Chronicles" - it\'s a blast!'),
        _turn("D1:3", "Joanna", "7 November 2022", "I started surfing five years ago and I love it."),
        _turn("D2:1", "Caroline", "8 May 2023", "What got you into running?"),
        _turn("D2:2", "Melanie", "8 May 2023", "Thanks, Caroline!", "I run to de-stress and clear my mind."),
        _turn("D2:3", "Melanie", "8 May 2023", "Yeah, I play the clarinet in our town band!"),
        _turn("D3:1", "Melanie", "9 June 2023",
              "Each day I carve out some me-time, running or playing my violin."),
        _turn("D3:2", "Caroline", "9 June 2023", "Thanks, Mel!", "And yup, I do- Oscar, my guinea pig."),
    ]


def _passes(prediction: str, gold: str) -> bool:
    return token_f1(prediction, gold) >= 0.4


def test_the_asked_persons_statement_wins_over_the_other_speakers_question() -> None:
    result = ExtractiveAnswerer().answer("What is Nate's favorite video game?", _chat())
    assert result.source is not None and result.source.speaker == "Nate"
    assert result.text == "Xenoblade Chronicles" and result.unit == "u:D1:2"


def test_a_number_question_is_answered_with_the_number_and_its_noun() -> None:
    result = ExtractiveAnswerer().answer("How long has Joanna been surfing?", _chat())
    assert result.text == "five years"


def test_a_reply_answers_the_question_asked_just_before_it_and_chatter_is_skipped() -> None:
    result = ExtractiveAnswerer().answer("What is Melanie's reason for getting into running?", _chat())
    assert result.source is not None and result.source.text == "I run to de-stress and clear my mind."
    assert _passes(result.text, "To de-stress and clear her mind")
    pet = ExtractiveAnswerer().answer("What pet does Caroline have?", _chat())
    assert pet.source is not None and "guinea pig" in pet.source.text and _passes(pet.text, "guinea pig")


def test_a_list_question_gathers_one_item_from_each_of_several_messages() -> None:
    result = ExtractiveAnswerer().answer("What instruments does Melanie play?", _chat())
    assert "clarinet" in result.text and "violin" in result.text
    assert _passes(result.text, "clarinet and violin")


def test_a_question_restricted_to_a_day_reads_what_was_said_that_day() -> None:
    context = [
        _turn("D1:1", "Nate", "1 January 2022", "We played chess at the game convention."),
        _turn("D9:1", "Nate", "9 October 2022", "We played this game Catan at the game convention."),
        _turn("D9:2", "Nate", "9 October 2022", "I love board games."),
    ]
    question = "What game did Nate play at the convention on 9 October, 2022?"
    result = ExtractiveAnswerer().answer(question, context)
    assert result.source is not None and result.source.dia_id == "D9:1" and "Catan" in result.text


def test_candidates_are_distinct_sentences_best_first_each_with_its_source_and_unit() -> None:
    reader = ExtractiveAnswerer()
    question = "What is Nate's favorite video game?"
    candidates = reader.candidates(question, _chat())
    first = reader.answer(question, _chat())
    assert candidates[0].text == first.text and candidates[0].source == first.source
    sources = [c.source for c in candidates]
    assert len(candidates) == len(set(sources)) == sum(len(i.sentences) for i in _chat())
    assert all(c.source is not None and c.unit == f"u:{c.source.dia_id}" for c in candidates)


def test_an_empty_context_is_answered_with_i_dont_know() -> None:
    reader = ExtractiveAnswerer()
    assert reader.answer("What did Ann buy?", []).text == "I don't know."
    assert reader.answer("What did Ann buy?", [ContextItem("u", [])]).source is None
    assert reader.candidates("What did Ann buy?", []) == []


def test_a_message_continuing_the_thread_of_the_question_wins_over_a_stray_shared_word() -> None:
    # D2:3 says none of the question's words, but continues the talk about the pottery class
    # (D2:1, D2:2) and says something new about it; D2:1 only names the class, D7:1 shares "think".
    context = [
        _turn("D2:1", "Ann", "3 May 2023", "I took a pottery class last week."),
        _turn("D2:2", "Bob", "3 May 2023", "Oh nice, a pottery class!"),
        _turn("D2:3", "Ann", "3 May 2023", "It was so relaxing, shaping wet clay calmed me down."),
        _turn("D7:1", "Ann", "9 June 2023", "I think my aunt visits soon."),
    ]
    result = ExtractiveAnswerer().answer("What did Ann think of the pottery class?", context)
    assert result.source is not None and result.source.dia_id == "D2:3" and "clay" in result.text


def test_the_phrasing_module_reads_a_question_and_a_sentence_on_its_own() -> None:
    query = parse_question("What kind of flooring does Jon want?", {"Jon", "Gina"})
    assert query.kind == "what" and query.subject == "Jon" and query.head == "floor"
    doc = Doc(Sentence("D1:1", "Jon", "1 May 2023", "I want Marley flooring for the studio."), "u", 0,
              analysed("I want Marley flooring for the studio."), False, [])
    assert "Marley" in phrase(query, doc)


def test_the_offline_module_still_offers_the_reader() -> None:
    assert OfflineReader is ExtractiveAnswerer


def test_how_many_reads_an_ordinal_as_the_count_and_drops_the_noun_asked_about() -> None:
    reader = ExtractiveAnswerer()
    ordinal = [_turn("D1:1", "Nate", "10 July 2022", "I won my fourth chess tournament on Friday!")]
    assert reader.answer("How many chess tournaments has Nate won?", ordinal).text == "four"
    kids = [_turn("D1:1", "Ann", "8 May 2023", "I have three kids and a very busy house.")]
    assert reader.answer("How many kids does Ann have?", kids).text == "three"


def test_why_reads_the_clause_a_word_of_cause_opens() -> None:
    context = [_turn("D1:1", "Jon", "8 May 2023",
                     "I opened a bakery downtown because I love baking bread for neighbours.")]
    answer = ExtractiveAnswerer().answer("Why did Jon open a bakery?", context).text
    assert "downtown" not in answer  # said before "because": what was done, not why
    assert "love" in answer and "bread" in answer


def test_who_reports_the_speakers_relative_in_the_third_person() -> None:
    context = [_turn("D1:1", "Maria", "8 May 2023", "My aunt inspired me to start volunteering.")]
    answer = ExtractiveAnswerer().answer("Who inspired Maria to start volunteering?", context).text
    assert answer == "Maria's aunt"


def test_what_titled_thing_prefers_the_sentence_that_names_one() -> None:
    # Both say "play" and nothing else of the question: the one naming a title is the answer.
    context = [_turn("D1:1", "Nate", "7 November 2022", "I play outside with my little brother every night."),
               _turn("D1:2", "Nate", "7 November 2022", 'I play "Hollow Knight" every night.')]
    assert ExtractiveAnswerer().answer("What game does Nate play?", context).text == "Hollow Knight"


def test_where_without_a_named_place_reads_what_a_preposition_of_place_opens() -> None:
    context = [_turn("D1:1", "Maria", "8 May 2023", "I made friends at the homeless shelter downtown.")]
    answer = ExtractiveAnswerer().answer("Where has Maria made friends?", context).text
    assert answer == "homeless shelter downtown"


_ANSWERS = """
import hashlib, sys
from memtrace_bench.locomo import load_conversation
from memtrace_bench.systems.interfaces import ContextItem, Sentence
from memtrace_bench.systems.reader import ExtractiveAnswerer
from memtrace_otel.text import sentences
digest, reader = hashlib.sha256(), ExtractiveAnswerer()
for cid in ("47", "30"):
    c = load_conversation(cid, sys.argv[1])
    ctx = [ContextItem(t.dia_id, [Sentence(t.dia_id, t.speaker, t.date, x) for x in sentences(t.text)])
           for s in c.sessions for t in s.turns]
    for qa in c.questions:
        a = reader.answer(qa.question, ctx)
        digest.update(f"{a.text}|{a.source.dia_id if a.source else ''}".encode())
print(digest.hexdigest())
"""


def test_answers_do_not_depend_on_the_processs_string_hashing(locomo: str) -> None:
    """A build's jobs run in several processes, each hashing strings its own way: the reader's
    answers (sums over sets of words) must not follow the order those sets iterate in. Whole
    conversations as context; before the sums were exact, hash seeds 1 and 3 differed here."""
    import os
    import subprocess
    import sys

    digests = set()
    for seed in ("1", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _ANSWERS, locomo], env=env, capture_output=True,
                              text=True, timeout=300, check=True)
        digests.add(done.stdout.strip())
    assert len(digests) == 1


def test_a_month_without_a_year_prefers_what_happened_in_that_month() -> None:
    from memtrace_bench.systems.interfaces import ContextItem, Sentence
    from memtrace_bench.systems.reader import ExtractiveAnswerer

    context = [ContextItem("u1", [Sentence("D1:1", "Mel", "10 July 2023", "We went camping at the lake.")]),
               ContextItem("u2", [Sentence("D2:1", "Mel", "20 June 2023", "We went camping in the forest.")])]
    reader = ExtractiveAnswerer()
    assert reader.answer("Where did Mel go camping in June?", context).source.dia_id == "D2:1"
    assert reader.answer("Where did Mel go camping in July?", context).source.dia_id == "D1:1"


def test_the_judge_stems_as_locomo_does() -> None:
    from memtrace_bench.systems.offline import F1Judge

    judge = F1Judge()
    assert judge.judge("What did Ann research?", "adoption agency", "Adoption agencies").passed
    assert not judge.judge("What did Ann research?", "a lawyer", "Adoption agencies").passed


def test_retrieval_weighs_the_questions_rare_word_over_common_ones() -> None:
    from memtrace_bench.systems.base import idf_overlap

    units = [frozenset({"mel", "realli", "love"}), frozenset({"mel", "kundalini"}),
             frozenset({"mel", "realli"})]
    shares = idf_overlap(frozenset({"mel", "realli", "kundalini"}), units)
    assert shares[1] > shares[0] and shares[1] > shares[2]


def test_a_list_question_reads_every_item_of_the_enumeration_a_sentence_makes() -> None:
    context = [_turn("D1:1", "James", "8 May 2022", "They can do tricks like sit, stay, paw, and rollover."),
               _turn("D1:2", "James", "8 May 2022", "Candles and essential oils add warmth to my yoga.")]
    reader = ExtractiveAnswerer()
    assert reader.answer("What tricks do James's dogs know?", context[:1]).text == "sit, stay, paw, rollover"
    # An item is at most two words: a longer run ends one enumeration and opens the next.
    things = reader.answer("What things does James use for his yoga?", context[1:]).text
    assert things == "Candles, essential oils"


def test_the_noun_a_what_kind_question_asks_about_counts_in_the_answers_length() -> None:
    context = [_turn("D1:1", "Jolene", "6 September 2023",
                     "I signed up for a meditation course at a retreat near a lake.")]
    answer = ExtractiveAnswerer().answer("What course did Jolene sign up for?", context).text
    assert "meditation course" in answer and len(answer.split()) <= 4
    assert _passes(answer, "meditation")
    # The farthest words make room for the noun, never the word it follows.
    query = parse_question("What kind of cookies did Jolene bake?", {"Jolene", "Deborah"})
    text = "[shares a photo of four chocolate chip cookies on a baking sheet]"
    doc = Doc(Sentence("D1:1", "Jolene", "1 May 2023", text), "u", 0, analysed(text), False, [])
    assert phrase(query, doc, 2) == "chip cookies"


def test_a_name_the_sentence_says_answers_before_one_the_next_sentence_lends() -> None:
    context = [_turn("D1:1", "Sam", "8 May 2023", "Also I watched The Godfather last night.",
                     'My dad kept quoting "An Offer You Can\'t Refuse" all evening.')]
    assert ExtractiveAnswerer().answer("What movie did Sam watch?", context).text == "Godfather"


def test_a_colon_between_letters_stays_inside_the_word() -> None:
    context = [_turn("D1:1", "John", "8 May 2022", "I played my favorite CS:GO game in a tournament.")]
    assert ExtractiveAnswerer().answer("What game did John play in a tournament?", context).text == "CS:GO"
