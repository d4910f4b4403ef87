"""Time in chat messages (memtrace_bench.systems.temporal): relative and explicit times resolved
against the day a sentence was said, question shapes, spans, and inputs that must not break it."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from memtrace_bench.systems import temporal
from memtrace_bench.systems.interfaces import Sentence
from memtrace_bench.systems.offline import F1Judge
from memtrace_bench.systems.temporal import (
    answer_duration,
    answer_when,
    answer_when_in,
    is_duration,
    is_temporal,
    parse_day,
    question_span,
    sentence_span,
)

D = dt.date
MONDAY = "8 May 2023"  # a Monday
SATURDAY = "15 July 2023"


def said(text: str, date: str = MONDAY, dia_id: str = "D1:1") -> Sentence:
    return Sentence(dia_id, "Mel", date, text)


def when(text: str, date: str = MONDAY, question: str = "When did Mel do it?") -> str:
    return answer_when(question, said(text, date))


# -- answers ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("I went to a support group yesterday.", "7 May 2023"),
    ("Last night was amazing!", "7 May 2023"),
    ("I'm trying it tonight!", "8 May 2023"),
    ("The opening is tomorrow.", "9 May 2023"),
    ("I bought it the day before yesterday.", "6 May 2023"),
    ("I ran a charity race last Saturday.", "the Saturday before 8 May 2023"),
    ("Last Fri I took my kids to a workshop.", "the Friday before 8 May 2023"),
    ("I joined a new group last Tues.", "the Tuesday before 8 May 2023"),
    ("I won my fourth tournament on Friday!", "the Friday before 8 May 2023"),
    ("Let's do it next Saturday!", "the Saturday after 8 May 2023"),
    ("How about Wednesday at 4?", "the Wednesday after 8 May 2023"),
    ("I told you about my school event last week.", "the week before 8 May 2023"),
    ("Guess what I did this week?", "the week of 8 May 2023"),
    ("Next week I have a community meeting.", "the week after 8 May 2023"),
    ("Last weekend I joined a mentorship program.", "the weekend before 8 May 2023"),
    ("That roadtrip this past weekend was insane!", "the weekend before 8 May 2023"),
    ("I'm hiking with some buddies this weekend.", "the weekend of 8 May 2023"),
    ("We went camping two weekends ago.", "two weekends before 8 May 2023"),
    ("I got a puppy two weeks ago!", "two weeks before 8 May 2023"),
    ("It happened the week before last.", "two weeks before 8 May 2023"),
    ("I adopted her a week ago.", "the week before 8 May 2023"),
    ("I went to a conference two days ago.", "6 May 2023"),
    ("We went to a convention last month.", "April 2023"),
    ("I'm going to a conference this month.", "May 2023"),
    ("We're going camping next month.", "June 2023"),
    ("I moved here two months ago.", "March 2023"),
    ("I read that book last year.", "2022"),
    ("I started transitioning three years ago.", "2020"),
    ("I first watched it around 3 years ago.", "2020"),
    ("I started volunteering about a year ago.", "May 2022"),
    ("He was part of our family for 10 years.", "2013"),
    ("I've had them for 3 years now.", "2020"),
    ("Seven years now, and I love it.", "2016"),
    ("We had a blast on our trip last summer.", "summer 2022"),
    ("Wanna go on a family outing this summer?", "summer 2023"),
    ("We're planning a reunion next winter.", "winter 2023"),
    ("Got the tattoo a few years ago.", "a few years before 8 May 2023"),
    ("I started a painting class a few days ago.", "a few days before 8 May 2023"),
    ("I saw someone drawing the other day.", "a few days before 8 May 2023"),
    ("She gave it to me in 2010 in Paris.", "2010"),
    ("My parents married in the summer of 1993.", "summer 1993"),
    ("I plan to return on July 20.", "20 July 2023"),
    ("It was on the 3rd of March.", "3 March 2023"),
    ("We met on May 3rd, 2021.", "3 May 2021"),
    ("We moved back in March 2019.", "March 2019"),
    ("I'll be there in early June.", "early June 2023"),
    ("We left at the end of December 2022.", "late December 2022"),
    ("The trip is the last week of September.", "the last week of September 2023"),
    ("The run was the first weekend of August 2022.", "the first weekend of August 2022"),
    ("It was mid-2021 when we met.", "mid 2021"),
])
def test_expressions_resolve_against_the_day_said(text: str, expected: str) -> None:
    assert when(text) == expected


@pytest.mark.parametrize(("text", "date", "expected"), [
    # Without a year a month or day takes the one the tense points to.
    ("I went there in December.", "10 January 2023", "December 2022"),
    ("I'm going there in December.", "10 January 2023", "December 2023"),
    ("The wedding is in February.", "10 January 2023", "February 2023"),
    ("Last August I told you about it.", "10 September 2023", "August 2023"),
    ("Last August I told you about it.", "10 July 2023", "August 2022"),
    # "last summer" said during the summer is the one before; after it, the one just over.
    ("We went camping last summer.", "11 August 2023", "summer 2022"),
    ("We went camping last summer.", "20 October 2023", "summer 2023"),
    # On a weekend "last weekend" is still the one before this one.
    ("Last weekend was busy.", "16 July 2023", "the weekend before 16 July 2023"),
])
def test_years_and_weeks_follow_tense_and_calendar(text: str, date: str, expected: str) -> None:
    assert when(text, date) == expected


def test_nothing_said_about_time_gives_the_day_it_was_said() -> None:
    assert when("I finally finished my screenplay!") == "8 May 2023"
    assert when("I recently took a writing class, a while back I tried poetry.") == "8 May 2023"
    assert when("It took me 2000 steps and cost 2020 dollars.") == "8 May 2023"


def test_which_month_takes_the_middle_of_the_span() -> None:
    sentence = said("I went there last week.", "3 May 2023")
    assert answer_when("Which month did Mel go?", sentence) == "April 2023"


def test_the_expression_nearest_the_questions_words_wins() -> None:
    text = "I had a quiet weekend after we went camping with my fam two weekends ago."
    answer = answer_when("When did Mel go camping?", said(text, "17 July 2023"))
    assert answer == "two weekends before 17 July 2023"
    text = "Last week I painted a lake, and yesterday I went to the museum."
    assert answer_when("When did Mel paint a lake?", said(text)) == "the week before 8 May 2023"
    assert answer_when("When did Mel go to the museum?", said(text)) == "7 May 2023"


def test_weak_cues_lose_to_clear_ones() -> None:
    text = "I've known her for 4 years, we met again last Friday."
    assert answer_when("When did Mel do it?", said(text)) == "the Friday before 8 May 2023"


@pytest.mark.parametrize(("question", "text", "expected"), [
    ("Which year did Mel move?", "We moved last summer.", "2022"),
    ("In what year did Mel move?", "We moved here two years ago.", "2021"),
    ("What year did Mel start?", "I started on my birthday.", "2023"),
    ("Which month did Mel go?", "I went there last week.", "May 2023"),
    ("Which month did Mel go?", "I went there two days ago.", "May 2023"),
    ("How long ago was Mel's birthday?", "She made it for my 18th birthday ten years ago.", "ten years ago"),
    ("How long ago did Mel move?", "We moved here in 2019.", "4 years ago"),
    ("How long ago did Mel move?", "We moved here yesterday.", "7 May 2023"),
])
def test_answers_take_the_shape_the_question_asks_for(question: str, text: str, expected: str) -> None:
    assert answer_when(question, said(text)) == expected


def test_answers_pass_the_judge_against_annotator_phrasings() -> None:
    judge = F1Judge()
    for text, gold in [("I ran a race last Saturday.", "The sunday before 8 May 2023"),
                       ("I met them last week.", "The week before 8 May 2023"),
                       ("I read it last year.", "2022"),
                       ("I've had her for two years now.", "in 2021"),
                       ("We went camping last summer.", "The summer of 2022"),
                       ("Got the tattoo a few years ago.", "A few years ago")]:
        assert judge.judge("When?", when(text), gold).passed, (text, gold)


# -- questions ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("question", "temporal_", "duration"), [
    ("When did Caroline go to the support group?", True, False),
    ("when is Mel's daughter's birthday", True, False),
    ("In which year did Jo move?", True, False),
    ("What year did Jo graduate?", True, False),
    ("Which month did Nate adopt Max?", True, False),
    ("On what date did Jo audition?", True, False),
    ("Since when has Jo painted?", True, False),
    ("How long ago was Caroline's 18th birthday?", True, False),
    ("How many years ago did Jo move?", True, False),
    ("How long has Nate had his turtles?", False, True),
    ("For how long has Nate had his turtles?", False, True),
    ("How many weeks passed between the two adoptions?", False, True),
    ("After how many weeks did Jo call?", False, True),
    ("How many days a week does Jo run?", False, False),
    ("What did Jo paint in May 2022?", False, False),
    ("Who did Maria have dinner with on May 3, 2023?", False, False),
    ("", False, False),
])
def test_question_kinds(question: str, temporal_: bool, duration: bool) -> None:
    assert is_temporal(question) is temporal_
    assert is_duration(question) is duration


@pytest.mark.parametrize(("question", "span"), [
    ("What did Jo watch on 1 May, 2022?", (D(2022, 5, 1), D(2022, 5, 1))),
    ("Who did Maria have dinner with on May 3, 2023?", (D(2023, 5, 3), D(2023, 5, 3))),
    ("What did Jo do on March 16, 2022?", (D(2022, 3, 16), D(2022, 3, 16))),
    ("Where did Jo travel in January 2023?", (D(2023, 1, 1), D(2023, 1, 31))),
    ("What did Jo adopt in 2021?", (D(2021, 1, 1), D(2021, 12, 31))),
    ("Which tournament did Nate win in the beginning of November 2022?", (D(2022, 11, 1), D(2022, 11, 10))),
    ("What did Jo do in the summer of 2022?", (D(2022, 6, 1), D(2022, 8, 31))),
    ("What did Jo do between 2020 and 2021?", (D(2020, 1, 1), D(2021, 12, 31))),
    ("What did Jo do in the second week of November?", None),
    ("Which outdoor spot did Joanna visit in May?", None),
    ("What did Jo do last summer?", None),
    ("What did Jo paint?", None),
    ("", None),
])
def test_question_span_needs_a_year(question: str, span: temporal.TimeSpan | None) -> None:
    assert question_span(question) == span


# -- spans ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "date", "span"), [
    ("I went yesterday.", MONDAY, (D(2023, 5, 7), D(2023, 5, 7))),
    ("I went last Friday.", SATURDAY, (D(2023, 7, 14), D(2023, 7, 14))),
    ("I went last Friday.", "14 July 2023", (D(2023, 7, 7), D(2023, 7, 7))),
    ("I went last week.", MONDAY, (D(2023, 5, 1), D(2023, 5, 7))),
    ("I went last week.", "10 May 2023", (D(2023, 5, 1), D(2023, 5, 9))),
    ("I went last weekend.", MONDAY, (D(2023, 5, 6), D(2023, 5, 7))),
    ("I'm going this weekend.", "10 May 2023", (D(2023, 5, 13), D(2023, 5, 14))),
    ("I went two weekends ago.", "17 July 2023", (D(2023, 7, 8), D(2023, 7, 9))),
    ("I went last month.", "15 March 2024", (D(2024, 2, 1), D(2024, 2, 29))),
    ("I went last month.", "5 January 2023", (D(2022, 12, 1), D(2022, 12, 31))),
    ("I went last year.", MONDAY, (D(2022, 1, 1), D(2022, 12, 31))),
    ("I went last winter.", "10 January 2023", (D(2021, 12, 1), D(2022, 2, 28))),
    ("It's been cold this winter.", "10 January 2023", (D(2022, 12, 1), D(2023, 2, 28))),
    ("It was the last weekend of September.", "1 October 2023", (D(2023, 9, 30), D(2023, 10, 1))),
    ("I went a few weeks ago.", MONDAY, (D(2023, 4, 3), D(2023, 4, 24))),
    ("Nothing about time here.", MONDAY, None),
    ("I went last week.", "whenever", None),
])
def test_sentence_spans(text: str, date: str, span: temporal.TimeSpan | None) -> None:
    assert sentence_span(said(text, date)) == span


# -- durations and neighbours ---------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("I've had them for 3 years now and they bring me joy!", "3 years"),
    ("I've known these friends for 4 years, since I moved.", "4 years"),
    ("Seven years now, and I've found my muses.", "seven years"),
    ("5 years already!", "5 years"),
    ("I've been painting since 2016.", "since 2016 (7 years)"),
    ("We were together a couple of months.", "a couple of months"),
    ("Yesterday was fun.", "7 May 2023"),  # no duration: the time instead
])
def test_durations(text: str, expected: str) -> None:
    assert answer_duration("How long has Mel had them?", said(text)) == expected


def test_a_sentence_without_time_borrows_from_its_own_message_only() -> None:
    message = [said("Last Friday was wild.", dia_id="D3:1"), said("I won a big race.", dia_id="D3:1"),
               said("What's new?", dia_id="D3:1"), said("Yesterday I rested.", dia_id="D3:2")]
    assert answer_when_in("When did Mel win?", message[1], message) == "the Friday before 8 May 2023"
    assert answer_when_in("When did Mel rest?", message[3], message) == "7 May 2023"
    lonely = said("I won a big race.", dia_id="D9:9")
    assert answer_when_in("When did Mel win?", lonely, message) == "8 May 2023"
    assert answer_when_in("When did Mel win?", lonely, []) == "8 May 2023"


# -- inputs that must not break it ----------------------------------------------------------------

@pytest.mark.parametrize("date", ["", "someday", "32 May 2023", "31 February 2023", "May 2023", "2023-13-40",
                                  "0 Jan 0000", "8 Maybe 2023"])
def test_dates_that_do_not_parse_fall_back_to_the_text(date: str) -> None:
    assert parse_day(date) is None
    assert answer_when("When?", said("I went yesterday.", date)) == date
    assert sentence_span(said("I went yesterday.", date)) is None
    assert answer_duration("How long?", said("for 3 years", date)) == date


@pytest.mark.parametrize("date", ["1:56 pm on 8 May, 2023", "8 May 2023", "May 8, 2023", "2023-05-08",
                                  "8th of May 2023", "Mon, 8 May 2023"])
def test_dates_in_several_forms(date: str) -> None:
    assert parse_day(date) == D(2023, 5, 8)


@pytest.mark.parametrize("text", [
    "", " ", "?!", "on February 30", "on the 31st of April", "999 decades ago", "99 years ago in 1951",
    "for many years", "in a few", "last", "next next next week", "the the summer of of", "Sun Sat Wed Mon",
    "May may march in May 2099", "0th of May", "00 May 2023", "in 20233", "$2020 and 2,020",
    "🎉 yesterday 🎉",
])
def test_odd_texts_never_raise(text: str) -> None:
    for date in (MONDAY, "1 January 1950", "31 December 2049", "1 January 0001", "31 December 9999"):
        sentence = said(text, date)
        assert isinstance(answer_when("When did it happen?", sentence), str)
        assert isinstance(answer_duration("How long?", sentence), str)
        span = sentence_span(sentence)
        assert span is None or span[0] <= span[1]
    question_span(text)


def test_random_word_salad_never_raises_and_is_deterministic() -> None:
    vocabulary = ["last", "next", "this", "past", "ago", "in", "on", "for", "the", "a", "few", "two", "3",
                  "days", "weeks", "weekend", "month", "year", "summer", "Friday", "Fri", "May", "June",
                  "2021", "of", "early", "end", "since", "now", "yesterday", "tomorrow", ",", "-", "15th"]
    rng = random.Random(13)
    for _ in range(500):
        text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 12)))
        sentence = said(text, rng.choice([MONDAY, SATURDAY, "29 February 2024", "1 January 2023"]))
        first = answer_when("When did Mel go?", sentence)
        assert first == answer_when("When did Mel go?", sentence)
        answer_duration("How long?", sentence)
        question_span(text)


def test_real_conversation_dates_parse(locomo: str) -> None:
    from memtrace_bench.locomo import load_conversation

    conversation = load_conversation("26", locomo)
    assert all(parse_day(session.date) for session in conversation.sessions)
