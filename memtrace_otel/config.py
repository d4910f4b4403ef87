"""Configuration: every environment variable memtrace-otel reads, and its default.

The benchmark's data directory (``MEMTRACE_LOCOMO_DIR``) is the benchmark package's own
(``benchmarks/memtrace_bench/config.py``): the runtime never reads it.

A bad environment value logs one line and falls back to the default; a bad
constructor argument raises :class:`ValueError` (the SDK's convention).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

__all__ = [
    "DEFAULT_STORE_LOOKBACK_SECONDS",
    "ENV_BACKEND_DEADLINE",
    "ENV_BACKEND_OTLP",
    "ENV_BACKEND_TIMEOUT",
    "ENV_CAPTURE_CONTENT",
    "ENV_CONTENT_MAX_CHARS",
    "ENV_CONTENT_STORE",
    "ENV_CONTENT_UPLOAD_BASE_PATH",
    "ENV_EVALUATION_FAIL_BELOW",
    "ENV_GENAI_UPLOAD_BASE_PATH",
    "ENV_JAEGER_URL",
    "ENV_MAX_INPUT_BYTES",
    "ENV_METRICS_OTLP",
    "ENV_OPENAI_API_KEY",
    "ENV_OPENAI_API_KEY_FALLBACK",
    "ENV_OPENAI_BASE_URL",
    "ENV_OPENAI_BASE_URL_FALLBACK",
    "ENV_OPENAI_MODEL",
    "ENV_SERVE_DATA_DIR",
    "ENV_SERVE_DATA_MIB",
    "ENV_SERVE_GRPC_PORT",
    "ENV_SERVE_HOST",
    "ENV_SERVE_HTTP_PORT",
    "ENV_SERVE_MEMORY_MIB",
    "ENV_SERVE_SETTLE",
    "ENV_STORE_LOOKBACK",
    "ENV_TEMPO_URL",
    "ContentCapture",
    "Setting",
    "backend_bounds_from_env",
    "content_capture_from_env",
    "content_max_chars_from_env",
    "content_store_from_env",
    "default_serve_data_dir",
    "env_flag",
    "env_int",
    "env_seconds",
    "evaluation_fail_below_from_env",
    "max_input_bytes_from_env",
    "setting",
    "settings",
    "settings_from_env",
    "upload_base_path_from_env",
    "value_type",
]

_logger = logging.getLogger(__name__)
T = TypeVar("T", int, float)

ENV_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The switch GenAI instrumentations use; ``true`` records variable contents on spans."""
ENV_CONTENT_MAX_CHARS = "MEMTRACE_CONTENT_MAX_CHARS"
"""Truncation limit for one captured content string."""
ENV_CONTENT_UPLOAD_BASE_PATH = "MEMTRACE_CONTENT_UPLOAD_BASE_PATH"
"""Upload variable contents to this directory or fsspec URL (``s3://``, ``memory://``), by hash."""
ENV_GENAI_UPLOAD_BASE_PATH = "OTEL_INSTRUMENTATION_GENAI_UPLOAD_BASE_PATH"
"""The GenAI upload hook's base path: used unless ``MEMTRACE_CONTENT_UPLOAD_BASE_PATH`` is set."""
ENV_CONTENT_STORE = "MEMTRACE_CONTENT_STORE"
"""Where ``analyze`` / ``graph`` / ``serve`` read referenced contents from (``--content-store``)."""
ENV_JAEGER_URL = "MEMTRACE_JAEGER_URL"
"""Jaeger query URL the CLI fetches linked traces from (``--jaeger``)."""
ENV_TEMPO_URL = "MEMTRACE_TEMPO_URL"
"""Tempo HTTP API URL the CLI fetches linked traces from (``--tempo``); exclusive with the Jaeger one."""
ENV_MAX_INPUT_BYTES = "MEMTRACE_MAX_INPUT_BYTES"
"""Ceiling on the (decompressed) bytes read from one span file; the rest is skipped with a problem."""
ENV_BACKEND_TIMEOUT = "MEMTRACE_BACKEND_TIMEOUT"
"""Seconds one request to the trace backend's query API may take (default 10)."""
ENV_BACKEND_DEADLINE = "MEMTRACE_BACKEND_DEADLINE"
"""Seconds one fetch of linked traces may take in all (default 60)."""
ENV_OPENAI_BASE_URL = "MEMTRACE_OPENAI_BASE_URL"
"""OpenAI-compatible endpoint for LLM engines and LLM steps (falls back to ``OPENAI_BASE_URL``)."""
ENV_OPENAI_MODEL = "MEMTRACE_OPENAI_MODEL"
"""Model name for LLM engines and LLM steps."""
ENV_OPENAI_API_KEY = "MEMTRACE_OPENAI_API_KEY"
"""API key (falls back to ``OPENAI_API_KEY``)."""
ENV_OPENAI_BASE_URL_FALLBACK = "OPENAI_BASE_URL"
"""The OpenAI client's own endpoint variable, read when ``MEMTRACE_OPENAI_BASE_URL`` is unset."""
ENV_OPENAI_API_KEY_FALLBACK = "OPENAI_API_KEY"
"""The OpenAI client's own key variable, read when ``MEMTRACE_OPENAI_API_KEY`` is unset."""

# memtrace serve (collector/serve_config.py's ServeConfig binds its fields to these).
ENV_SERVE_HOST = "MEMTRACE_SERVE_HOST"
"""Address ``memtrace serve``'s receivers bind to (``--host``)."""
ENV_SERVE_GRPC_PORT = "MEMTRACE_SERVE_GRPC_PORT"
"""OTLP/gRPC port of ``memtrace serve`` (``--grpc-port``; -1 turns the receiver off)."""
ENV_SERVE_HTTP_PORT = "MEMTRACE_SERVE_HTTP_PORT"
"""OTLP/HTTP port of ``memtrace serve`` (``--http-port``; -1 turns the receiver off)."""
ENV_SERVE_SETTLE = "MEMTRACE_SERVE_SETTLE"
"""Seconds a trace must be quiet before ``memtrace serve`` judges it (``--settle``)."""
ENV_SERVE_MEMORY_MIB = "MEMTRACE_SERVE_MEMORY_MIB"
"""``memtrace serve``'s memory limit in MiB (``--memory-limit``)."""
ENV_SERVE_DATA_DIR = "MEMTRACE_SERVE_DATA_DIR"
"""``memtrace serve``'s write-ahead store: acknowledged spans and pending annotations (``--data-dir``)."""
ENV_SERVE_DATA_MIB = "MEMTRACE_SERVE_DATA_MIB"
"""Most MiB of requests and annotations the data directory holds; the oldest are dropped past it."""
ENV_BACKEND_OTLP = "MEMTRACE_BACKEND_OTLP"
"""OTLP endpoint annotation spans are exported to by ``memtrace serve`` (``--backend-otlp``)."""
ENV_STORE_LOOKBACK = "MEMTRACE_STORE_LOOKBACK"
"""Seconds before a failure ``memtrace serve`` searches for traces that used its memory stores."""

DEFAULT_STORE_LOOKBACK_SECONDS = 7 * 24 * 3600.0
"""How far back ``serve`` searches a store's traces: memories outlive sessions, a week covers most."""



def default_serve_data_dir() -> str:
    """``$XDG_STATE_HOME/memtrace/serve`` (``~/.local/state/memtrace/serve`` when it is unset): state
    that must survive a restart but is not configuration or cache, as the XDG base directories say."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "memtrace", "serve")


_DEFAULT_CONTENT_MAX_CHARS = 4096
_DEFAULT_BACKEND_TIMEOUT = 10.0
_DEFAULT_BACKEND_DEADLINE = 60.0
_DEFAULT_MAX_INPUT_BYTES = 1 << 30
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


def env_flag(name: str) -> bool:
    """A yes/no switch from the environment: ``true``/``1``/``yes``/``on`` is on; unset, ``false``,
    ``0``, ``no`` or ``off`` is off; anything else warns once and is off.

    >>> import os
    >>> os.environ["MEMTRACE_DOCTEST_FLAG"] = " Yes"
    >>> env_flag("MEMTRACE_DOCTEST_FLAG")
    True
    >>> del os.environ["MEMTRACE_DOCTEST_FLAG"]
    """
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw not in ("", "0", "false", "no", "off"):
        _warn_once(name, "%s=%r is not a recognised value (true/false); taken as false", name, raw)
    return False


def upload_base_path_from_env() -> str | None:
    """Where to upload contents: ``MEMTRACE_CONTENT_UPLOAD_BASE_PATH``, else the GenAI hook's
    ``OTEL_INSTRUMENTATION_GENAI_UPLOAD_BASE_PATH``; ``None`` (no upload) when neither is set.

    >>> import os
    >>> for name in (ENV_CONTENT_UPLOAD_BASE_PATH, ENV_GENAI_UPLOAD_BASE_PATH):
    ...     os.environ.pop(name, None) and None
    >>> upload_base_path_from_env() is None
    True
    """
    for name in (ENV_CONTENT_UPLOAD_BASE_PATH, ENV_GENAI_UPLOAD_BASE_PATH):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


ENV_EVALUATION_FAIL_BELOW = "MEMTRACE_EVALUATION_FAIL_BELOW"
"""An evaluator's ``gen_ai.evaluation.score.value`` under this fails the answer (default 0.5; ``off``)."""
_DEFAULT_EVALUATION_FAIL_BELOW = 0.5
ENV_METRICS_OTLP = "MEMTRACE_METRICS_OTLP"
"""OTLP/HTTP base URL ``memtrace serve`` exports its attribution metrics to (``--metrics-otlp``)."""


def evaluation_fail_below_from_env() -> float | None:
    """The score under which an evaluator's result is a failure (``MEMTRACE_EVALUATION_FAIL_BELOW``,
    default 0.5); ``None`` when set to ``off`` (only labels decide).

    >>> os.environ.pop(ENV_EVALUATION_FAIL_BELOW, None) and None
    >>> evaluation_fail_below_from_env()
    0.5
    """
    raw = os.environ.get(ENV_EVALUATION_FAIL_BELOW, "").strip()
    if raw.lower() == "off":
        return None
    return _env_number(ENV_EVALUATION_FAIL_BELOW, _DEFAULT_EVALUATION_FAIL_BELOW, float, math.isfinite,
                       "a finite number or off")


def content_store_from_env() -> str | None:
    """The store ``MEMTRACE_CONTENT_STORE`` names for readers, or ``None``."""
    return os.environ.get(ENV_CONTENT_STORE, "").strip() or None


def _env_number(name: str, default: T, parse: Callable[[str], T], valid: Callable[[T], bool],
                wanted: str) -> T:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not valid(value):
        _warn_once(name, "%s=%r is not %s; using %s", name, raw, wanted, default)
        return default
    return value


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    """Read an integer >= ``minimum`` from the environment, or warn once and use ``default``."""
    return _env_number(name, default, int, lambda value: value >= minimum, f"an integer >= {minimum}")


def content_max_chars_from_env() -> int:
    """Truncation limit for captured content (``MEMTRACE_CONTENT_MAX_CHARS``, default 4096)."""
    return env_int(ENV_CONTENT_MAX_CHARS, _DEFAULT_CONTENT_MAX_CHARS)


def max_input_bytes_from_env() -> int:
    """Ceiling on the bytes read from one span file (``MEMTRACE_MAX_INPUT_BYTES``, default 1 GiB).

    Decompressed bytes: a small ``.gz`` can hold gigabytes.
    """
    return env_int(ENV_MAX_INPUT_BYTES, _DEFAULT_MAX_INPUT_BYTES)


def env_seconds(name: str, default: float) -> float:
    """Read a positive, finite number of seconds from the environment, or warn once and use ``default``."""
    return _env_number(name, default, float, lambda value: 0 < value < math.inf, "a number of seconds > 0")


def env_millis(name: str, default: float) -> float:
    """Read a positive, finite number of milliseconds (the unit of the SDK's ``OTEL_*_INTERVAL``
    variables) from the environment, or warn once and use ``default``."""
    return _env_number(name, default, float, lambda value: 0 < value < math.inf,
                       "a number of milliseconds > 0")


def backend_bounds_from_env() -> tuple[float, float]:
    """``(timeout, deadline)`` of trace-backend fetches: ``MEMTRACE_BACKEND_TIMEOUT`` (per request,
    default 10 s) and ``MEMTRACE_BACKEND_DEADLINE`` (a whole fetch, default 60 s)."""
    timeout = env_seconds(ENV_BACKEND_TIMEOUT, _DEFAULT_BACKEND_TIMEOUT)
    return timeout, max(timeout, env_seconds(ENV_BACKEND_DEADLINE, _DEFAULT_BACKEND_DEADLINE))


@dataclass(frozen=True, slots=True)
class Setting:
    """How one field of a configuration dataclass is given from outside: its command-line option,
    environment variable and help. The field's default is the one default; the CLI's options are
    built from these (``cli/serve_cmd.py``), so no default or variable name is written twice."""

    option: str
    """The long option, e.g. ``--grpc-port``."""
    help: str
    env: str | None = None
    """The environment variable read when the option is not given."""
    minimum: float | None = None
    """Smallest accepted value of a number (the CLI refuses less as a usage error)."""
    choices: tuple[str, ...] = ()
    off: int | None = None
    """A number that stands for ``None`` (a port of -1 turns its receiver off)."""
    metavar: str | None = None


_SETTING = "memtrace.setting"


def setting(default: Any, **spec: Any) -> Any:
    """A dataclass field with ``default`` and a :class:`Setting` built from ``spec``."""
    return dataclasses.field(default=default, metadata={_SETTING: Setting(**spec)})


def settings(cls: type) -> list[tuple[dataclasses.Field[Any], Setting]]:
    """The fields of dataclass ``cls`` that carry a :class:`Setting`, in declaration order."""
    return [(f, f.metadata[_SETTING]) for f in dataclasses.fields(cls) if _SETTING in f.metadata]


def value_type(field: dataclasses.Field[Any]) -> type:
    """The type a setting's text is parsed to: its default's (``str`` for a ``None`` default)."""
    return str if field.default is None else type(field.default)


def settings_from_env(cls: type) -> dict[str, Any]:
    """Field name -> value for each setting of ``cls`` whose environment variable is set.

    Raises
    ------
    ValueError
        One line naming the variable and what it should hold.

    >>> import os
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Demo:
    ...     port: int = setting(80, option="--port", help="", env="DEMO_PORT", off=-1)
    >>> os.environ["DEMO_PORT"] = "-1"
    >>> settings_from_env(Demo)
    {'port': None}
    >>> os.environ["DEMO_PORT"] = "eighty"
    >>> settings_from_env(Demo)
    Traceback (most recent call last):
    ...
    ValueError: DEMO_PORT='eighty' is not an integer
    >>> del os.environ["DEMO_PORT"]
    """
    found: dict[str, Any] = {}
    for field, spec in settings(cls):
        raw = os.environ.get(spec.env) if spec.env else None
        if raw is None or raw.strip() == "":
            continue
        kind = value_type(field)
        try:
            value = kind(raw.strip())
        except ValueError:
            wanted = {int: "an integer", float: "a number"}.get(kind, "a string")
            raise ValueError(f"{spec.env}={raw!r} is not {wanted}") from None
        if spec.minimum is not None and value < spec.minimum and value != spec.off:
            raise ValueError(f"{spec.env}={raw!r} is below {spec.minimum:g}")
        if spec.choices and value not in spec.choices:
            raise ValueError(f"{spec.env}={raw!r} is not one of {', '.join(spec.choices)}")
        found[field.name] = None if spec.off is not None and value == spec.off else value
    return found
