from __future__ import annotations

from pathlib import Path

from memtrace_otel.semconv import CONTENT_KEYS, all_keys

DOCS = Path(__file__).resolve().parent.parent / "docs" / "conventions.md"


def test_no_key_is_both_leaf_and_prefix() -> None:
    keys = set(all_keys())
    for key in keys:
        prefixes = {k for k in keys if k.startswith(key + ".")}
        assert not prefixes, f"{key} is a leaf and the prefix of {prefixes}"


def test_every_key_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    missing = [key for key in all_keys() if f"`{key}`" not in text]
    assert not missing, f"keys missing from docs/conventions.md: {missing}"


def test_keys_are_unique() -> None:
    keys = all_keys()
    assert len(keys) == len(set(keys))


def test_content_keys_are_declared_keys_and_opt_in_in_the_docs() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert set(all_keys()) >= CONTENT_KEYS
    for key in CONTENT_KEYS:
        (row,) = [line for line in text.splitlines() if line.startswith(f"| `{key}` |")]
        assert "opt-in content" in row, key
