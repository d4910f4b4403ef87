"""Time expressions in chat text, found and resolved against the day they were said.

:func:`scan` finds every expression of :data:`RULES` in a text (the longest where they overlap)
and resolves it to an answer phrased the way people (and LoCoMo's annotators) state times, and to
the days it covers (:data:`TimeSpan`); :func:`durations` finds amounts of time ("for 3 years").
:mod:`memtrace_bench.systems.temporal` answers questions with them. Said on Monday 8 May 2023:

==================================  ===================================  ============================
said                                answer                               days (:data:`TimeSpan`)
==================================  ===================================  ============================
yesterday / today / tomorrow        7 / 8 / 9 May 2023                   that day
last Friday, on Fri (past tense)    the Friday before 8 May 2023         that day
last week / this week / next week   the week before / of / after 8 May   Monday a week ago .. 7 May
last weekend, two weekends ago      the / two weekend(s) before 8 May    that Saturday and Sunday
last month, two months ago          April 2023, March 2023               that month
last year, two years ago            2022, 2021                           that year
a year ago                          May 2022                             that month
for ten years (now)                 2013 (when it began)                 that year
last summer                         summer 2022                          June .. August
a few weeks ago                     a few weeks before 8 May 2023        two to five weeks back
on May 3rd, in May, in 2019         3 May 2023, May 2023, 2019           that day / month / year
early June, last week of June       early June 2023, the last week ...   that part of the month
==================================  ===================================  ============================

A month or day named without a year takes the year the sentence's tense suggests (the
next one for the future, the last one for the past, else the nearest). "A while back" and
"recently" name no time: the answer is then the day the sentence was said.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = [
    "MONTH_NAMES",
    "RULES",
    "Context",
    "Found",
    "TimeSpan",
    "durations",
    "format_day",
    "matches",
    "month_number",
    "parse_day",
    "scan",
]

TimeSpan = tuple[dt.date, dt.date]
"""A closed interval of days."""

_DAY = dt.timedelta(days=1)
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
                "September", "October", "November", "December")
_MONTH_NUMBER = {name.lower(): i + 1 for i, name in enumerate(MONTH_NAMES)} | {
    name.lower()[:3]: i + 1 for i, name in enumerate(MONTH_NAMES)} | {"sept": 9}
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
            "couple": 2, "a couple": 2, "couple of": 2, "a couple of": 2}
_ORDINALS = {"first": 0, "second": 1, "third": 2, "fourth": 3}
_THIRDS = {"early": 0, "beginning": 0, "start": 0, "mid": 1, "middle": 1, "late": 2, "end": 2}
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}

# -- pattern vocabulary (compiled case-insensitively) ------------------------------------------
_MON = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
        r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b\.?")
_WD = (r"(?:mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:r(?:s(?:day)?)?)?|fri(?:day)?"
       r"|sat(?:urday)?|sun(?:day)?)\b")
_WD_FULL = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
_YEAR = r"(?:19[5-9]\d|20[0-4]\d)\b"
_QTY = (r"(?:\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty"
        r"|(?:a\s+)?couple(?:\s+of)?|(?:a\s+)?few|several|some|many)")
_UNIT = r"(?:day|week|weekend|month|year|decade)s?\b"
_DAYNUM = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?\b"
_ABOUT = r"(?:(?:about|around|almost|nearly|over|roughly|like|maybe|just|only)\s+)?"
_IN_YEAR = r"(?:,?\s+(?:of\s+)?(?P<y>" + _YEAR + "))?"
_FOR = r"\bfor\s+(?:the\s+(?:past|last)\s+)?" + _ABOUT
_LAST = r"last|this\s+past|the\s+past|past|next|this\s+coming|coming|this"
# The tense near an expression decides "on Friday", "in May", "the summer": the nearest marker wins.
_FUTURE = re.compile(r"\b(?:will|won't|going to|gonna|plan(?:s|ning)?|can't wait|looking forward|upcoming"
                     r"|hop(?:e|ing) to|about to|tomorrow|next|coming up|soon|intend|wanna|want to|let's"
                     r"|shall|how about|would you like|can we|could we|see you|(?:am|are|'m|'re)\s+\w+ing)\b"
                     r"|'ll\b", re.I)
_PAST = re.compile(r"\b(?:was|were|had|did|went|got|made|took|saw|came|met|won|ago|yesterday|last"
                   r"|\w{2,}[^\We]ed)\b", re.I)


class Found(NamedTuple):
    """One resolved time expression of a sentence."""

    phrase: str  # the answer, e.g. "the week before 9 June 2023"
    span: TimeSpan
    start: int  # where the expression is in the sentence (characters)
    end: int
    weak: int  # characters of distance added when ranking: weak cues ("for 10 years") lose ties
    ago: str = ""  # "ten years ago" as said, for "how long ago" questions


class Context(NamedTuple):
    day: dt.date  # when the sentence was said
    tense: int  # -1 past, 0 unknown, 1 future


_Answer = tuple[str, TimeSpan] | None


# -- days, months and phrases ------------------------------------------------------------------

def format_day(day: dt.date) -> str:
    return f"{day.day} {MONTH_NAMES[day.month - 1]} {day.year}"


def _on(day: dt.date) -> tuple[str, TimeSpan]:
    return format_day(day), (day, day)


def _month_span(year: int, month: int) -> TimeSpan:
    following = dt.date(year + month // 12, month % 12 + 1, 1)
    return dt.date(year, month, 1), following - _DAY


def _shift_month(day: dt.date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def _in_month(year: int, month: int) -> tuple[str, TimeSpan]:
    return f"{MONTH_NAMES[month - 1]} {year}", _month_span(year, month)


def _in_year(year: int) -> tuple[str, TimeSpan]:
    return str(year), (dt.date(year, 1, 1), dt.date(year, 12, 31))


def _quantity(text: str) -> int | None:
    """``"two"`` -> 2, ``"a couple of"`` -> 2, ``"a few"`` -> ``None`` (vague)."""
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS.get(text)


def month_number(text: str) -> int:
    """``"Sept."`` -> 9; 0 when ``text`` is no month.

    >>> month_number("Sept."), month_number("june"), month_number("Monday")
    (9, 6, 0)
    """
    return _MONTH_NUMBER.get(text.lower().rstrip("."), 0)


def _words(m: re.Match[str], group: str) -> str:
    return " ".join((m.groupdict().get(group) or "").lower().split())


def _pick_year(ctx: Context, span_of: Callable[[int], TimeSpan]) -> int:
    """The year of a month or day named without one: the next, last or nearest by the tense."""
    options = []
    for year in (ctx.day.year - 1, ctx.day.year, ctx.day.year + 1):
        lo, hi = span_of(year)
        if ctx.tense == 0 or (ctx.tense > 0 and hi >= ctx.day) or (ctx.tense < 0 and lo <= ctx.day):
            gap = 0 if lo <= ctx.day <= hi else min(abs((lo - ctx.day).days), abs((hi - ctx.day).days))
            options.append((gap, year * ctx.tense, year))
    return min(options)[2]


_SAID = re.compile(r"(?:(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?([A-Za-z]+)\.?|([A-Za-z]+)\.?\s+(\d{1,2})"
                   r"(?:st|nd|rd|th)?),?\s+(\d{4})|(\d{4})-(\d\d?)-(\d\d?)")


@functools.lru_cache(maxsize=4096)
def parse_day(text: str) -> dt.date | None:
    """The day a date string names ("8 May 2023", "1:56 pm on 8 May, 2023", "May 8, 2023",
    "2023-05-08"), or ``None`` when it names none.

    >>> parse_day("1:56 pm on 8 May, 2023"), parse_day("31 February 2023"), parse_day("soon")
    (datetime.date(2023, 5, 8), None, None)
    """
    for m in _SAID.finditer(text or ""):
        day1, month1, month2, day2, year, iso_year, iso_month, iso_day = m.groups()
        try:
            if iso_year:
                return dt.date(int(iso_year), int(iso_month), int(iso_day))
            if month_number(month1 or month2):
                return dt.date(int(year), month_number(month1 or month2), int(day1 or day2))
        except ValueError:
            continue
    return None


# -- the rules: a pattern and what a match means ------------------------------------------------
# A handler gets the match and the context and returns (answer, span) or None (no time after all);
# a ValueError (30 February) also means no time.

def _direction(modifier: str, ctx: Context) -> int:
    """-1 before the day said, 1 after, 0 the current week/month ("this"); else by the tense."""
    if modifier in ("last", "this past", "past", "the past"):
        return -1
    if modifier in ("next", "this coming", "coming"):
        return 1
    return 0 if modifier == "this" else 1 if ctx.tense > 0 else -1


def _relative_day(m: re.Match[str], ctx: Context) -> _Answer:
    said = _words(m, "day")
    offset = {"yesterday": -1, "last night": -1, "tomorrow": 1}.get(said, 0)
    offset = -2 if said.endswith("before yesterday") else 2 if said.endswith("after tomorrow") else offset
    return _on(ctx.day + offset * _DAY)


def _weekday_rule(m: re.Match[str], ctx: Context) -> _Answer:
    wanted = next(i for i, name in enumerate(_WEEKDAYS) if name.lower()[:2] == m.group("wd").lower()[:2])
    modifier = _words(m, "mod")
    step = 1 if _direction("on" if modifier == "this" else modifier, ctx) > 0 else -1
    day = ctx.day + step * _DAY
    while day.weekday() != wanted:
        day += step * _DAY
    return f"the {_WEEKDAYS[wanted]} {'after' if step > 0 else 'before'} {format_day(ctx.day)}", (day, day)


def _weeks(ctx: Context, weeks: int, unit: str, said: str = "") -> _Answer:
    """``weeks`` before (negative) or after the day said, as "the week before 9 June 2023"."""
    monday = ctx.day - ctx.day.weekday() * _DAY + weeks * 7 * _DAY
    lo, hi = (monday + 5 * _DAY, monday + 6 * _DAY) if unit == "weekend" else (monday, monday + 6 * _DAY)
    if weeks == 0:
        return f"the {unit} of {format_day(ctx.day)}", (lo, hi)
    if weeks == -1 and unit == "week":
        hi = ctx.day - _DAY  # "last week" is also the past seven days
    count = said or ("the" if abs(weeks) == 1 else str(abs(weeks)))
    plural = "s" if count != "the" and _quantity(count) != 1 else ""
    return f"{count} {unit}{plural} {'before' if weeks < 0 else 'after'} {format_day(ctx.day)}", (lo, hi)


def _week_rule(m: re.Match[str], ctx: Context) -> _Answer:
    unit, modifier = _words(m, "unit"), _words(m, "mod")
    direction = _direction(modifier, ctx)
    if modifier == "this" and unit == "weekend" and ctx.tense < 0 and ctx.day.weekday() < 5:
        direction = -1  # "this weekend was great", said on a Monday
    return _weeks(ctx, direction, unit)


def _month_or_year_rule(m: re.Match[str], ctx: Context) -> _Answer:
    direction = _direction(_words(m, "mod"), ctx)
    if _words(m, "unit") == "year":
        return _in_year(ctx.day.year + direction)
    return _in_month(*_shift_month(ctx.day, direction))


def _ago_rule(m: re.Match[str], ctx: Context) -> _Answer:
    """"two days ago", "a few months back", "in three weeks", "years ago"."""
    said, unit = _words(m, "q"), _words(m, "unit").rstrip("s")
    if _words(m, "dir") == "in" and ctx.tense <= 0:
        return None  # "haven't talked in a few days", "built in a day": a length, not a time
    count = _quantity(said) if said else None
    sign = 1 if _words(m, "dir") in ("later", "from now", "in") else -1
    if count is None:  # vague: two to five units back, phrased as said
        days = {"day": 1, "week": 7, "weekend": 7, "month": 30, "year": 365, "decade": 3652}[unit]
        near, far = (ctx.day + sign * n * days * _DAY for n in (2, 5))
        side = "before" if sign < 0 else "after"
        phrase = f"{said + ' ' if said else ''}{unit}s {side} {format_day(ctx.day)}"
        return phrase, (min(near, far), max(near, far))
    if unit in ("week", "weekend"):
        return _weeks(ctx, sign * count, unit, "" if count == 1 else said)
    if unit == "day":
        return _on(ctx.day + sign * count * _DAY)
    if unit == "month" or (unit == "year" and count == 1):  # a year ago is precise to the month
        return _in_month(*_shift_month(ctx.day, sign * count * (12 if unit == "year" else 1)))
    return _in_year(ctx.day.year + sign * count * (10 if unit == "decade" else 1))


def _dated(m: re.Match[str], ctx: Context, month: int, day: int) -> dt.date:
    """``day`` of ``month`` in the year the match names, else the year the tense suggests."""
    if m.groupdict().get("y"):
        return dt.date(int(m.group("y")), month, day)
    year = _pick_year(ctx, lambda y: (dt.date(y, month, min(day, 28)),) * 2)
    return dt.date(year, month, day)


def _explicit_day(m: re.Match[str], ctx: Context) -> _Answer:
    month = month_number(m.group("mon"))
    return _on(_dated(m, ctx, month, int(re.sub(r"\D", "", m.group("d"))))) if month else None


def _named_month(m: re.Match[str], ctx: Context) -> _Answer:
    month, modifier = month_number(m.group("mon")), _words(m, "mod")
    if not month:
        return None
    if m.group("y"):
        return _in_month(int(m.group("y")), month)
    if modifier in ("last", "next", "this"):
        shift = {"last": -1, "next": 1, "this": 0}[modifier]
        return _in_month(ctx.day.year + shift * ((month >= ctx.day.month) if shift < 0 else
                                                 (month <= ctx.day.month)), month)
    return _in_month(_pick_year(ctx, lambda y: _month_span(y, month)), month)


def _part_of_month(m: re.Match[str], ctx: Context) -> _Answer:
    """"early June", "the end of May 2022", "the last week of September", "the first weekend of August"."""
    month = month_number(m.group("mon"))
    if not month:
        return None
    year = int(m.group("y")) if m.group("y") else _pick_year(ctx, lambda y: _month_span(y, month))
    first, last = _month_span(year, month)
    name = f"{MONTH_NAMES[month - 1]} {year}"
    if m.group("ord"):
        ordinal, unit = _words(m, "ord"), _words(m, "unit")
        if unit == "weekend":
            saturday = (last - ((last.weekday() - 5) % 7) * _DAY if ordinal == "last" else
                        first + ((5 - first.weekday()) % 7 + 7 * _ORDINALS[ordinal]) * _DAY)
            return f"the {ordinal} weekend of {name}", (saturday, saturday + _DAY)
        lo = last - 6 * _DAY if ordinal == "last" else first + 7 * _ORDINALS[ordinal] * _DAY
        return f"the {ordinal} week of {name}", (lo, lo + 6 * _DAY)
    third = next(_THIRDS[w] for w in _words(m, "part").replace("-", " ").split() if w in _THIRDS)
    lo = first + 10 * third * _DAY
    return f"{('early', 'mid', 'late')[third]} {name}", (lo, last if third == 2 else lo + 9 * _DAY)


def _part_of_year(m: re.Match[str], ctx: Context) -> _Answer:
    year = int(m.group("y"))
    third = next(_THIRDS[w] for w in _words(m, "part").replace("-", " ").split() if w in _THIRDS)
    lo, hi = _month_span(year, 4 * third + 1)[0], _month_span(year, 4 * third + 4)[1]
    return f"{('early', 'mid', 'late')[third]} {year}", (lo, hi)


def _season_span(name: str, year: int) -> TimeSpan:
    """Three months from the season's first; winter 2022 is December 2022 to February 2023."""
    first = dt.date(year, _SEASONS[name], 1)
    return first, _month_span(*_shift_month(first, 2))[1]


def _season(m: re.Match[str], ctx: Context) -> _Answer:
    name = _words(m, "s").replace("autumn", "fall")
    if m.group("y"):
        return f"{name} {m.group('y')}", _season_span(name, int(m.group("y")))
    spans = [(y, _season_span(name, y)) for y in range(ctx.day.year - 2, ctx.day.year + 2)]
    direction = _direction(_words(m, "mod"), ctx)
    if direction > 0:  # the next one to begin
        year = next(y for y, (lo, _) in spans if lo > ctx.day)
    elif direction < 0:  # the last one over
        year = [y for y, (_, hi) in spans if hi < ctx.day][-1]
    else:  # the one under way, else this year's
        year = next(y for y, (lo, hi) in spans if lo <= ctx.day <= hi or lo.year == ctx.day.year)
    return f"{name} {year}", _season_span(name, year)


def _year_rule(m: re.Match[str], ctx: Context) -> _Answer:
    return _in_year(int(m.group("y")))


class _Rule(NamedTuple):
    pattern: re.Pattern[str]
    handler: Callable[[re.Match[str], Context], _Answer]
    weak: int = 0  # characters of distance added when ranking
    absolute: bool = False  # names its own year when it has one (usable in questions)
    ago: bool = False  # "ten years ago": said as a distance back


def _rule(pattern: str, handler: Callable[[re.Match[str], Context], _Answer], weak: int = 0, *,
          absolute: bool = False, ago: bool = False) -> _Rule:
    return _Rule(re.compile(pattern, re.I), handler, weak, absolute, ago)


RULES: tuple[_Rule, ...] = (
    _rule(r"\b(?P<day>(?:the\s+)?day\s+(?:before\s+yesterday|after\s+tomorrow)|yesterday|last\s+night|today"
          r"|tonight|tomorrow|this\s+(?:morning|afternoon|evening)|earlier\s+today)\b", _relative_day),
    _rule(r"\b(?P<mod>last|this\s+past|past|next|this\s+coming|coming|this|on)\s+(?P<wd>" + _WD + ")",
          _weekday_rule),
    _rule(r"\b(?P<wd>" + _WD_FULL + r")(?!')", _weekday_rule, 25),
    _rule(r"\b(?P<mod>" + _LAST + r"|over\s+the|on\s+the)\s+(?P<unit>week|weekend)\b(?!\s+of\b)", _week_rule),
    _rule(r"\bthe\s+(?P<unit>week|weekend)\s+before\s+last\b",
          lambda m, ctx: _weeks(ctx, -2, _words(m, "unit"), "two")),
    _rule(r"\b(?P<mod>" + _LAST + r")\s+(?P<unit>month|year)\b", _month_or_year_rule),
    _rule(r"\b" + _ABOUT + r"(?P<q>" + _QTY + r")\s+(?P<unit>" + _UNIT + r")\s+(?P<dir>ago|back|earlier"
          r"|later|from\s+now)\b", _ago_rule, ago=True),
    _rule(r"\b(?P<unit>days|weeks|months|years|decades)\s+ago\b", _ago_rule, 10, ago=True),
    _rule(r"\b(?P<dir>in)\s+" + _ABOUT + r"(?P<q>" + _QTY + r")\s+(?P<unit>" + _UNIT + ")", _ago_rule, 10),
    _rule(_FOR + r"(?P<q>" + _QTY + r")\s+(?P<unit>years?|months?)\b", _ago_rule, 40),
    _rule(r"\b(?P<q>" + _QTY + r")\s+(?P<unit>years?|months?)\s+now\b", _ago_rule, 20),
    _rule(r"\bthe\s+other\s+(?:day|night)\b",
          lambda m, ctx: (f"a few days before {format_day(ctx.day)}", (ctx.day - 6 * _DAY, ctx.day - _DAY)),
          10),
    _rule(r"\b(?P<mon>" + _MON + r")\s+(?:the\s+)?(?P<d>" + _DAYNUM + ")" + _IN_YEAR, _explicit_day,
          absolute=True),
    _rule(r"\b(?:the\s+)?(?P<d>" + _DAYNUM + r")\s+(?:of\s+)?(?P<mon>" + _MON + ")" + _IN_YEAR, _explicit_day,
          absolute=True),
    _rule(r"\b(?P<mod>last|this|next|in|since|during|until|by|from|around|back\s+in)\s+(?P<mon>" + _MON + ")"
          + _IN_YEAR, _named_month, absolute=True),
    _rule(r"\b(?P<mon>" + _MON + r"),?\s+(?:of\s+)?(?P<y>" + _YEAR + ")", _named_month, absolute=True),
    _rule(r"\b(?P<part>early|mid|late|the\s+(?:beginning|start|middle|end)\s+of|(?:the\s+)?(?P<ord>first"
          r"|second|third|fourth|last)\s+(?P<unit>week|weekend)\s+of)[\s-]*(?P<mon>" + _MON + ")" + _IN_YEAR,
          _part_of_month, absolute=True),
    _rule(r"\b(?P<part>early|mid|late|the\s+(?:beginning|start|middle|end)\s+of)[\s-]*(?P<y>" + _YEAR + ")",
          _part_of_year, absolute=True),
    _rule(r"\b(?P<mod>last|this\s+past|this|next|that|the)\s+(?P<s>spring|summer|fall|autumn|winter)\b"
          + _IN_YEAR, _season, absolute=True),
    _rule(r"\b(?P<s>spring|summer|fall|autumn|winter)\s+(?:of\s+)?(?P<y>" + _YEAR + ")", _season,
          absolute=True),
    # A bare year, not an amount ("2000 people").
    _rule(r"(?<![$\d,.])\b(?P<y>" + _YEAR + r")(?!\s*(?:%|dollars|bucks|people|miles|meters|km|feet|steps"
          r"|words|calories|pieces|times))", _year_rule, absolute=True),
)


def matches(text: str, rules: Sequence[_Rule]) -> list[tuple[re.Match[str], _Rule]]:
    """Every rule's matches, the longest kept where they overlap ("last week of May" over "last week")."""
    found = sorted(((m, rule) for rule in rules for m in rule.pattern.finditer(text)),
                   key=lambda pair: (pair[0].start() - pair[0].end(), pair[0].start()))
    kept: list[tuple[re.Match[str], _Rule]] = []
    for m, rule in found:
        if all(m.end() <= k.start() or m.start() >= k.end() for k, _ in kept):
            kept.append((m, rule))
    return sorted(kept, key=lambda pair: pair[0].start())


def _tense(markers: Sequence[tuple[int, int]], start: int, end: int) -> int:
    """The sign (-1 past, 1 future) of the tense marker nearest ``start..end`` (outside it: the
    "last" of "the last week of May" says nothing); 0 without one."""
    outside = [mark for mark in markers if not start <= mark[0] < end]
    return min(outside, key=lambda mark: max(mark[0] - end, start - mark[0]), default=(0, 0))[1]


@functools.lru_cache(maxsize=65536)
def scan(text: str, said: dt.date) -> tuple[Found, ...]:
    """The time expressions of ``text`` resolved against the day it was said."""
    markers = [(m.start(), sign) for sign, tense in ((1, _FUTURE), (-1, _PAST)) for m in tense.finditer(text)]
    found = []
    for m, rule in matches(text, RULES):
        try:
            answer = rule.handler(m, Context(said, _tense(markers, m.start(), m.end())))
        except (ValueError, OverflowError, IndexError, StopIteration):
            answer = None  # a day that does not exist, or a year out of range: no time after all
        if answer is not None:
            ago = " ".join(m.group(0).split()) if rule.ago else ""
            found.append(Found(answer[0], answer[1], m.start(), m.end(), rule.weak, ago))
    return tuple(found)


_DURATIONS = (  # (pattern, weak): "for 3 years", "3 years now", "since 2016"; then any amount of time
    (re.compile(_FOR + r"(?P<q>" + _QTY + r")\s+(?P<unit>" + _UNIT + ")", re.I), 0),
    (re.compile(r"\b(?P<q>" + _QTY + r")\s+(?P<unit>" + _UNIT + r")\s+(?:now|already)\b", re.I), 0),
    (re.compile(r"\bsince\s+(?:(?P<mon>" + _MON + r")\s+)?(?P<y>" + _YEAR + ")", re.I), 0),
    (re.compile(r"\b" + _ABOUT + r"(?P<q>" + _QTY + r")\s+(?P<unit>" + _UNIT + r")\s+ago\b", re.I), 10),
    (re.compile(r"\b(?P<q>" + _QTY + r")[\s-]+(?P<unit>" + _UNIT + ")", re.I), 30),
)


def _duration_phrase(m: re.Match[str], said: dt.date) -> str | None:
    """"for 3 years" -> "3 years" (as said); "since 2016" -> "since 2016 (7 years)"."""
    if m.groupdict().get("y"):
        years = said.year - int(m.group("y"))
        return f"since {m.group('y')} ({years} year{'s' * (years != 1)})" if years >= 0 else None
    count = _words(m, "q")
    return f"{count} {_words(m, 'unit').rstrip('s')}{'s' * (_quantity(count) != 1)}"


def durations(text: str, said: dt.date) -> list[Found]:
    """The amounts of time ``text`` says something has lasted ("for 3 years", "seven years now",
    "since 2016"), phrased as said; their span is the day it was said.

    >>> sorted({f.phrase for f in durations("I've had them for 3 years now!", dt.date(2022, 1, 23))})
    ['3 years']
    """
    return [Found(phrase, (said, said), m.start(), m.end(), weak)
            for pattern, weak in _DURATIONS for m in pattern.finditer(text)
            if (phrase := _duration_phrase(m, said))]
