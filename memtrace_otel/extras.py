"""How to install an optional part, in one line, worded so that it works as written.

memtrace-otel is installed from a checkout or from a wheel built from one (``python -m build``
writes ``dist/memtrace_otel-<version>-py3-none-any.whl``); until it is on a package index,
``pip install 'memtrace-otel[serve]'`` fails. Every message that names a missing extra (the
CLI's, the engines', the examples') is made here, so the wording is the same everywhere.
"""

from __future__ import annotations

from memtrace_otel.version import __version__

__all__ = ["install_hint", "missing_extra", "wheel_name"]


def wheel_name() -> str:
    """The file name ``python -m build`` gives this version's wheel."""
    return f"memtrace_otel-{__version__}-py3-none-any.whl"


def install_hint(extra: str) -> str:
    """The install line of ``extra``, from a checkout or a built wheel.

    >>> install_hint("serve").startswith("pip install '.[serve]' in a memtrace-otel checkout")
    True
    """
    return (f"pip install '.[{extra}]' in a memtrace-otel checkout, or "
            f"pip install 'dist/{wheel_name()}[{extra}]' beside a built wheel")


def missing_extra(what: str, extra: str) -> str:
    """One line: ``what`` needs the ``extra`` extra, and how to install it.

    >>> missing_extra("memtrace serve", "serve").split(":")[0]
    'memtrace serve needs the [serve] extra'
    """
    return f"{what} needs the [{extra}] extra: {install_hint(extra)}"
