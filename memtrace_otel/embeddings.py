"""The optional offline embedding model, loaded once per process (the ``[semantic]`` extra).

wordllama ships its weights inside the package, so loading it needs no
network. Both the attribution engines (ranking evidence when none is named)
and the benchmark's reference systems use this one loader; without wordllama
(or numpy) each falls back to a lexical method and says so once in the log.

The model is a token-embedding table and a tokenizer, pooled by mean; its files are read
here directly (:class:`TokenEmbeddings`) rather than through ``import wordllama``, whose
package imports pydantic, requests and its training helpers (0.23 s of CPU, more than the
load itself) and converts the whole table to float32. The vectors are the same bits
(``tests/test_embeddings.py`` compares them with ``WordLlama.load``'s); when the files are
not where wordllama 0.4 keeps them, the package's own loader is used.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import struct
from typing import Any, TypeGuard

from memtrace_otel.extras import install_hint

__all__ = ["TokenEmbeddings", "load_wordllama"]

_logger = logging.getLogger(__name__)

_CONFIG = "l2_supercat"
_DIMENSIONS = 256
_TENSOR = "embedding.weight"
_BATCH = 64
_MAX_HEADER = 100 << 20
"""The largest safetensors header read (the safetensors library's own limit)."""
"""wordllama's ``embed`` batch size: texts are padded to the longest of their batch of 64."""


class TokenEmbeddings:
    """wordllama's dense ``embed``: tokens looked up in the table, averaged over the attention mask.

    The table stays float16 as stored (16 MB, not 32): only the rows a batch looks up are
    widened to float32, which is exact, so each vector is the bits of ``WordLlamaInference.embed``.
    """

    def __init__(self, table: Any, tokenizer: Any) -> None:
        self.table = table
        self.tokenizer = tokenizer
        tokenizer.enable_padding()
        tokenizer.no_truncation()

    @classmethod
    def from_files(cls, weights: str, tokenizer: str) -> TokenEmbeddings:
        import numpy as np
        from tokenizers import Tokenizer

        # Every value of the safetensors header is checked where it is read: a file that is not what
        # wordllama 0.4 ships raises ValueError, and the caller loads through the package instead.
        length = os.path.getsize(weights)
        with open(weights, "rb") as stream:
            head = stream.read(8)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 0 < size <= min(length - 8, _MAX_HEADER):
                raise ValueError(f"{weights}: not a safetensors file (header size {size})")
            header = json.loads(stream.read(size))
        entry = header.get(_TENSOR) if isinstance(header, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(entry, dict) and entry.get("dtype") == "F16" and _ints(shape) and _ints(offsets)):
            raise ValueError(f"{weights}: no F16 tensor {_TENSOR!r} in it")
        (rows, columns), (start, end) = shape, offsets
        if rows <= 0 or columns != _DIMENSIONS or not 0 <= start <= end or end - start != rows * columns * 2 \
                or 8 + size + end > length:
            raise ValueError(f"{weights}: tensor {_TENSOR!r} of shape {shape} at {offsets} does not fit")
        table = np.fromfile(weights, dtype="<f2", count=rows * columns, offset=8 + size + start)
        return cls(table.reshape(rows, columns), Tokenizer.from_file(tokenizer))

    def embed(self, texts: str | list[str]) -> Any:
        """Mean-pooled token vectors, one float32 row per text (wordllama's ``embed`` defaults)."""
        import numpy as np

        if isinstance(texts, str):
            texts = [texts]
        pooled = np.empty((len(texts), self.table.shape[1]), dtype=np.float32)
        for i in range(0, len(texts), _BATCH):
            encoded = self.tokenizer.encode_batch(texts[i:i + _BATCH], is_pretokenized=False,
                                                  add_special_tokens=False)
            ids = np.array([e.ids for e in encoded], dtype=np.int32)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
            np.clip(ids, 0, self.table.shape[0] - 1, out=ids)
            vectors = self.table[ids].astype(np.float32)
            # The same operations, in the same order and dtypes, as WordLlamaInference.avg_pool.
            counts = np.maximum(mask.sum(axis=1, keepdims=True), 1.0).astype(np.float32)
            summed = np.sum(vectors * mask[..., np.newaxis], axis=1, dtype=np.float32)
            pooled[i:i + len(encoded)] = summed / counts
        return pooled


def _ints(value: Any) -> TypeGuard[list[int]]:
    """Whether ``value`` is a list of two ints (a tensor's shape or data offsets)."""
    return isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)


def _bundled_files() -> tuple[str, str] | None:
    # find_spec locates the package without running its __init__ (which imports all of wordllama).
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = next(iter(spec.submodule_search_locations))
    weights = os.path.join(root, "weights", f"{_CONFIG}_{_DIMENSIONS}.safetensors")
    tokenizer = os.path.join(root, "tokenizers", f"{_CONFIG}_tokenizer_config.json")
    return (weights, tokenizer) if os.path.isfile(weights) and os.path.isfile(tokenizer) else None


@functools.lru_cache(maxsize=1)
def load_wordllama() -> Any | None:
    """The wordllama model (an object with ``embed``), loaded once per process from the package's own weights.

    ``disable_download`` and the package directory as cache keep it off the
    network; ``None`` (logged once) when wordllama is not installed or fails.
    """
    try:
        files = _bundled_files()
    except (ImportError, ValueError):  # ValueError: a module blocked as sys.modules[name] = None
        files = None
    if files is not None:
        try:
            return TokenEmbeddings.from_files(*files)
        except ImportError:
            pass  # numpy or tokenizers missing: the package's loader below says which
        except Exception as error:  # a file unlike wordllama 0.4's (its tokenizer raises bare Exception)
            _logger.info("reading wordllama's files directly failed (%s); loading through the package", error)
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError:
        _logger.info("wordllama is not installed (%s); using lexical ranking", install_hint("semantic"))
        return None
    try:
        return WordLlama.load(config=_CONFIG, dim=_DIMENSIONS, cache_dir=os.path.dirname(wordllama.__file__),
                              disable_download=True)
    except Exception as error:  # a broken install must not stop offline attribution
        _logger.warning("wordllama could not load its bundled weights (%s); using lexical ranking", error)
        return None
