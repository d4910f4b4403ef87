"""Configuration: every environment variable memtrace-otel reads, and its default.

A bad environment value logs one line and falls back to the default; a bad
constructor argument raises :class:`ValueError` (the SDK's convention).
"""

from __future__ import annotations

import logging
import os
from enum import Enum

__all__ = [
    "ENV_CAPTURE_CONTENT",
    "ENV_CONTENT_MAX_CHARS",
    "ENV_JAEGER_URL",
    "ENV_LOCOMO_DIR",
    "ENV_MAX_INPUT_BYTES",
    "ENV_OPENAI_API_KEY",
    "ENV_OPENAI_BASE_URL",
    "ENV_OPENAI_MODEL",
    "ENV_TEMPO_URL",
    "ContentCapture",
    "content_capture_from_env",
    "content_max_chars_from_env",
    "env_int",
    "locomo_dir",
    "max_input_bytes_from_env",
]

_logger = logging.getLogger(__name__)

ENV_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The switch GenAI instrumentations use; ``true`` records variable contents on spans."""
ENV_CONTENT_MAX_CHARS = "MEMTRACE_CONTENT_MAX_CHARS"
"""Truncation limit for one captured content string."""
ENV_LOCOMO_DIR = "MEMTRACE_LOCOMO_DIR"
"""Where the LoCoMo conversations live (default ``../shared/data/locomo``)."""
ENV_JAEGER_URL = "MEMTRACE_JAEGER_URL"
"""Jaeger query URL the CLI fetches linked traces from (``--jaeger``)."""
ENV_TEMPO_URL = "MEMTRACE_TEMPO_URL"
"""Tempo HTTP API URL the CLI fetches linked traces from (``--tempo``); exclusive with the Jaeger one."""
ENV_MAX_INPUT_BYTES = "MEMTRACE_MAX_INPUT_BYTES"
"""Ceiling on the (decompressed) bytes read from one span file; the rest is skipped with a problem."""
ENV_OPENAI_BASE_URL = "MEMTRACE_OPENAI_BASE_URL"
"""OpenAI-compatible endpoint for LLM engines and LLM steps (falls back to ``OPENAI_BASE_URL``)."""
ENV_OPENAI_MODEL = "MEMTRACE_OPENAI_MODEL"
"""Model name for LLM engines and LLM steps."""
ENV_OPENAI_API_KEY = "MEMTRACE_OPENAI_API_KEY"
"""API key (falls back to ``OPENAI_API_KEY``)."""

_DEFAULT_CONTENT_MAX_CHARS = 4096
_DEFAULT_MAX_INPUT_BYTES = 1 << 30
_LOCOMO_RELATIVE = os.path.join("..", "shared", "data", "locomo")
_warned: set[str] = set()


class ContentCapture(Enum):
    """Whether variable contents go on spans."""

    NO_CONTENT = "no_content"
    SPAN = "span"


def _warn_once(key: str, message: str, *args: object) -> None:
    if key not in _warned:
        _warned.add(key)
        _logger.warning(message, *args)


def content_capture_from_env() -> ContentCapture:
    """Decide content capture once, from ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.

    Unset means no content (the GenAI default: exported spans stay private).
    An invalid value warns once and also means no content.

    >>> import os
    >>> os.environ.pop(ENV_CAPTURE_CONTENT, None) and None
    >>> content_capture_from_env()
    <ContentCapture.NO_CONTENT: 'no_content'>
    """
    raw = os.environ.get(ENV_CAPTURE_CONTENT, "").strip().lower()
    if raw in ("", "false", "0", "no", "no_content"):
        return ContentCapture.NO_CONTENT
    if raw in ("true", "1", "yes", "span", "span_only", "span_and_event"):
        return ContentCapture.SPAN
    _warn_once(
        ENV_CAPTURE_CONTENT,
        "%s=%r is not a recognised value (true/false); content capture stays off",
        ENV_CAPTURE_CONTENT,
        raw,
    )
    return ContentCapture.NO_CONTENT


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    """Read a positive integer from the environment, or warn once and use ``default``."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        _warn_once(name, "%s=%r is not an integer >= %d; using %d", name, raw, minimum, default)
        return default
    return value


def content_max_chars_from_env() -> int:
    """Truncation limit for captured content (``MEMTRACE_CONTENT_MAX_CHARS``, default 4096)."""
    return env_int(ENV_CONTENT_MAX_CHARS, _DEFAULT_CONTENT_MAX_CHARS)


def max_input_bytes_from_env() -> int:
    """Ceiling on the bytes read from one span file (``MEMTRACE_MAX_INPUT_BYTES``, default 1 GiB).

    Decompressed bytes: a small ``.gz`` can hold gigabytes.
    """
    return env_int(ENV_MAX_INPUT_BYTES, _DEFAULT_MAX_INPUT_BYTES)


def locomo_dir() -> str:
    """Directory of the LoCoMo conversations.

    ``MEMTRACE_LOCOMO_DIR`` when set; otherwise ``../shared/data/locomo`` beside
    the current directory, or beside the checkout this package was installed from.
    """
    configured = os.environ.get(ENV_LOCOMO_DIR)
    if configured:
        return configured
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for base in (os.getcwd(), checkout):
        candidate = os.path.normpath(os.path.join(base, _LOCOMO_RELATIVE))
        if os.path.isdir(candidate):
            return candidate
    return os.path.normpath(os.path.join(os.getcwd(), _LOCOMO_RELATIVE))
