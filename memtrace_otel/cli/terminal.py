"""Text bound for a terminal: input shown as it is, never obeyed.

Span names, questions, answers, file names and problem messages come from
whoever wrote the spans. Printed raw, ``ESC [2J`` clears the screen, ``ESC ]0;…BEL``
retitles the window, a C1 ``CSI`` (U+009B) does the same on some terminals, a bidi
override (U+202E) makes a line read differently from what it holds, and a lone
surrogate makes the write itself fail. Rich's ``escape`` only neutralises
``[markup]``; every human-readable line of the CLI goes through this module instead,
which makes such characters visible (``\\x1b``, ``\\u202e``) and then escapes markup.
``--json`` output needs none of this: ``json.dumps`` escapes control characters.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rich.markup import escape

__all__ = ["cell", "number", "safe_markup", "safe_text"]

# C0 and C1 controls and DEL; the bidi embeddings, overrides, isolates and marks; the
# Unicode line and paragraph separators (a new line inside a one-line message); lone
# surrogates (unencodable: writing them raises).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")
_WHITESPACE = re.compile(r"[ \t\n\r\f\v]+")
_ELLIPSIS = "…"


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except ValueError:  # an int past the interpreter's digit limit (sys.set_int_max_str_digits)
        return f"<{type(value).__name__} too large to print>"


def safe_text(value: Any) -> str:
    """``value`` as one line of plain text with every control character made visible.

    For plain (non-rich) output such as click error messages.

    >>> safe_text("a\\x1b[2Jb\\nc")
    'a\\\\x1b[2Jb\\\\x0ac'
    """
    text = _text(value)
    return _UNSAFE.sub(_visible, text) if _UNSAFE.search(text) else text


def safe_markup(value: Any) -> str:
    """``value`` for a rich console: control characters made visible, then markup escaped.

    >>> safe_markup("[bold]\\x07")
    '\\\\[bold]\\\\x07'
    """
    return escape(safe_text(value))


def cell(value: Any, limit: int = 60) -> str:
    """User content for a table cell: whitespace runs flattened to one space, cut at ``limit``.

    ``None`` is a dim dash.

    >>> cell("two\\n  lines", limit=8)
    'two lin…'
    """
    if value is None:
        return "[dim]-[/dim]"
    flat = _WHITESPACE.sub(" ", _text(value)).strip()
    if len(flat) > limit:
        flat = flat[: limit - 1] + _ELLIPSIS
    return safe_markup(flat)


def number(value: Any, spec: str = ".2f") -> str:
    """A number formatted with ``spec``; anything else (a string score, a list) shown as text.

    >>> number(0.5), number("0.5"), number(True), number(float("nan"))
    ('0.50', '0.5', 'True', 'nan')
    """
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return cell(value, 20)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    try:
        return format(value, spec)
    except (OverflowError, ValueError):  # a 5,000-digit integer does not fit a float
        return f"<{int(value).bit_length()}-bit integer>"
