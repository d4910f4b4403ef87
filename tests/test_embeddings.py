"""The offline embedding model read from wordllama's own files: wordllama's vectors, without its package."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memtrace_otel.attribution import ranking
from memtrace_otel.embeddings import TokenEmbeddings, load_wordllama

np = pytest.importorskip("numpy")
wordllama = pytest.importorskip("wordllama")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lengths that pad differently within a batch, an empty text, text the tokenizer splits into
# bytes, and more than one batch of 64 (so the batching and the padding per batch both count).
TEXTS = [
    "", " ", "Rex", "Ann adopted a dog named Max in May 2023.",
    "Caroline went to the LGBTQ support group on 7 May 2023, the day before the parade " * 12,
    "Ünïcödé: 日本語のテキスト, émojis 🎉🐕, and tabs\tand\nnewlines",
    "When did Melanie paint a sunrise? 2022",
] + [f"memory {i}: user {i % 7} prefers {'tea' if i % 2 else 'coffee'} since {2000 + i}" for i in range(150)]


@pytest.fixture(scope="module")
def reference() -> object:
    return wordllama.WordLlama.load(cache_dir=os.path.dirname(wordllama.__file__), disable_download=True)


def test_the_vectors_are_wordllama_s_bit_for_bit(reference: object) -> None:
    model = load_wordllama()
    assert isinstance(model, TokenEmbeddings)
    ours, theirs = model.embed(TEXTS), reference.embed(TEXTS)  # type: ignore[attr-defined]
    assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape == (len(TEXTS), 256)
    assert ours.tobytes() == theirs.tobytes()
    for text in TEXTS[:7]:  # alone, each is padded only to its own length
        assert model.embed(text).tobytes() == reference.embed(text).tobytes()  # type: ignore[attr-defined]


def test_the_engines_unit_vectors_are_those_of_wordllama_s_model(reference: object) -> None:
    ours = ranking.embedder()
    assert ours is not None
    theirs = ranking._normalised(reference.embed)  # type: ignore[attr-defined]
    assert ours(TEXTS).tobytes() == theirs(TEXTS).tobytes()


def test_loading_the_model_does_not_import_the_wordllama_package() -> None:
    code = ("import sys; from memtrace_otel.embeddings import load_wordllama; m = load_wordllama(); "
            "print(type(m).__name__, 'wordllama' in sys.modules, m.embed(['a dog']).shape)")
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["TokenEmbeddings", "False", "(1,", "256)"]


def test_without_the_files_the_package_s_loader_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from memtrace_otel import embeddings

    files = _files()
    monkeypatch.setattr(embeddings, "_bundled_files", lambda: None)
    load_wordllama.cache_clear()
    try:
        model = load_wordllama()
        assert model is not None and not isinstance(model, TokenEmbeddings)
        direct = TokenEmbeddings.from_files(*files)
        assert model.embed(TEXTS[:3]).tobytes() == direct.embed(TEXTS[:3]).tobytes()
    finally:
        load_wordllama.cache_clear()


def _safetensors(header: object, data: bytes = b"") -> bytes:
    import json
    import struct

    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize("weights", [
    b"", b"\x01\x02", (2**63 + 5).to_bytes(8, "little") + b"{}", (2**40).to_bytes(8, "little") + b"{}",
    _safetensors([]), _safetensors({"embedding.weight": "x"}),
    _safetensors({"embedding.weight": {"dtype": "F16", "shape": "256", "data_offsets": [0, 0]}}),
    _safetensors({"embedding.weight": {"dtype": "F16", "shape": [0, 256], "data_offsets": [0, 0]}}),
    _safetensors({"embedding.weight": {"dtype": "F16", "shape": [2, 256], "data_offsets": ["0", "1024"]}}),
    _safetensors({"embedding.weight": {"dtype": "F16", "shape": [2, 256], "data_offsets": [0, 1024]}}),
    _safetensors({"embedding.weight": {"dtype": "F32", "shape": [2, 256], "data_offsets": [0, 2048]}},
                 bytes(2048)),
], ids=["empty", "short", "huge-size", "header-past-the-end", "list", "entry-text", "shape-text", "no-rows",
        "offsets-text", "data-past-the-end", "not-f16"])
def test_weights_unlike_wordllama_s_fall_back_to_the_package_s_loader(tmp_path, monkeypatch, weights: bytes
                                                                      ) -> None:
    """A weights file that is not what wordllama ships is refused where its header is read (ValueError, or
    the struct and JSON errors of a cut file), and the model is loaded through the package: no traceback
    out of attribution, and never a table that fails later at query time."""
    from memtrace_otel import embeddings

    path = tmp_path / "weights.safetensors"
    path.write_bytes(weights)
    tokenizer = _files()[1]
    with pytest.raises(Exception) as refused:
        TokenEmbeddings.from_files(str(path), tokenizer)
    assert not isinstance(refused.value, (MemoryError, OverflowError, IndexError, TypeError))
    monkeypatch.setattr(embeddings, "_bundled_files", lambda: (str(path), tokenizer))
    load_wordllama.cache_clear()
    try:
        model = load_wordllama()
        assert model is not None and not isinstance(model, TokenEmbeddings)
    finally:
        load_wordllama.cache_clear()


def _files() -> tuple[str, str]:
    from memtrace_otel import embeddings

    files = embeddings._bundled_files()
    assert files is not None
    return files
