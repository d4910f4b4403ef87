"""The benchmark's own configuration: where the LoCoMo conversations are.

It lives here, not in :mod:`memtrace_otel.config`, because only the benchmark reads the data; the
variable's name (``MEMTRACE_LOCOMO_DIR``) is unchanged from when it did.
"""

from __future__ import annotations

import os

__all__ = ["ENV_LOCOMO_DIR", "locomo_dir"]

ENV_LOCOMO_DIR = "MEMTRACE_LOCOMO_DIR"
"""Where the LoCoMo conversations live (default ``../shared/data/locomo``)."""

_LOCOMO_RELATIVE = os.path.join("..", "shared", "data", "locomo")
# benchmarks/memtrace_bench/config.py -> the checkout: ../shared sits beside it.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def locomo_dir() -> str:
    """Directory of the LoCoMo conversations.

    ``MEMTRACE_LOCOMO_DIR`` when set; otherwise ``../shared/data/locomo`` beside
    the current directory, or beside the checkout this package was installed from.
    """
    configured = os.environ.get(ENV_LOCOMO_DIR)
    if configured:
        return configured
    for base in (os.getcwd(), _CHECKOUT):
        candidate = os.path.normpath(os.path.join(base, _LOCOMO_RELATIVE))
        if os.path.isdir(candidate):
            return candidate
    return os.path.normpath(os.path.join(os.getcwd(), _LOCOMO_RELATIVE))
