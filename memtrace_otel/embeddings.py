"""The optional offline embedding model, loaded once per process (the ``[semantic]`` extra).

wordllama ships its weights inside the package, so loading it needs no
network. Both the attribution engines (ranking evidence when none is named)
and the benchmark's reference systems use this one loader; without wordllama
(or numpy) each falls back to a lexical method and says so once in the log.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from memtrace_otel.extras import install_hint

__all__ = ["load_wordllama"]

_logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def load_wordllama() -> Any | None:
    """The wordllama model, loaded once per process from the package's own weights.

    ``disable_download`` and the package directory as cache keep it off the
    network; ``None`` (logged once) when wordllama is not installed or fails.
    """
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError:
        _logger.info("wordllama is not installed (%s); using lexical ranking", install_hint("semantic"))
        return None
    try:
        return WordLlama.load(cache_dir=os.path.dirname(wordllama.__file__), disable_download=True)
    except Exception as error:  # a broken install must not stop offline attribution
        _logger.warning("wordllama could not load its bundled weights (%s); using lexical ranking", error)
        return None
