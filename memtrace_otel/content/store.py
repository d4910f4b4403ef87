"""A content-addressed store of variable contents, on any filesystem ``fsspec`` can open.

The GenAI conventions keep message content off spans and, when it must be kept,
upload it through ``fsspec`` to a base path the user controls, recording a reference
on the span (``opentelemetry-util-genai``'s upload hook). memtrace does the same for
variable contents, addressed by the content hash every ``memtrace.variables``
descriptor already carries (:func:`memtrace_otel.wire.content_hash`), so one text is
stored once however many spans describe it.

Layout: ``<base>/memtrace/<h[:2]>/<h>``, one UTF-8 file per text, ``h`` the 16 hex
digits of the hash. The ``memtrace/`` folder keeps the objects apart from whatever
else shares the base path (the GenAI hook writes its own files there). ``<base>`` is
a local directory or any fsspec URL (``s3://bucket/prefix``, ``gs://``,
``memory://name``); the filesystem's own package (``s3fs``, ``gcsfs``) must be installed.
"""

from __future__ import annotations

import posixpath
from typing import Any

from memtrace_otel.wire import content_hash

__all__ = ["ContentStoreError", "RefStore", "is_digest", "open_store"]

_FOLDER = "memtrace"
_HEX = frozenset("0123456789abcdef")
_DIGEST_LENGTH = 16


class ContentStoreError(ValueError):
    """A store path or URL that cannot name a store (unknown protocol, filesystem package missing)."""


def is_digest(text: object) -> bool:
    """Whether ``text`` is a content hash as descriptors write it (16 lowercase hex digits).

    >>> is_digest("a7b6eda801e5347d"), is_digest("../../etc/passwd")
    (True, False)
    """
    return isinstance(text, str) and len(text) == _DIGEST_LENGTH and set(text) <= _HEX


class RefStore:
    """One content store: where the text of each hash lives, and reading and writing it.

    Thread-safe as far as the filesystem is (fsspec filesystems are shared, thread-safe
    instances); its only state is the set of folders it made, which only grows.

    >>> store = open_store("memory://doctest-store")
    >>> digest = store.put("hello")
    >>> digest, store.read(digest), store.write(digest, "hello")
    ('a7b6eda801e5347d', 'hello', False)
    >>> store.path_of(digest)
    '/doctest-store/memtrace/a7/a7b6eda801e5347d'
    """

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        self.url: str = fs.unstrip_protocol(self.root)
        """The store's URL, protocol included: what spans record and ``--content-store`` takes."""
        self._made: set[str] = set()  # folders made by this object: at most 256, one makedirs each

    def path_of(self, digest: str) -> str:
        """The filesystem path of the text whose hash is ``digest``.

        Raises
        ------
        ValueError
            ``digest`` is not 16 lowercase hex digits (it may come from input: never a path).
        """
        if not is_digest(digest):
            raise ValueError(f"{str(digest)[:40]!r} is not a content hash (16 lowercase hex digits)")
        return posixpath.join(self.root, _FOLDER, digest[:2], digest)

    def read(self, digest: str) -> str:
        """The text stored under ``digest``; ``OSError`` (``FileNotFoundError`` if absent) otherwise."""
        with self.fs.open(self.path_of(digest), "rb") as handle:
            return handle.read().decode("utf-8", "replace")

    def exists(self, digest: str) -> bool:
        return bool(self.fs.exists(self.path_of(digest)))

    def available(self) -> bool:
        """Whether the store's base path exists (a vanished store does not)."""
        return bool(self.fs.exists(self.root))

    def write(self, digest: str, text: str) -> bool:
        """Store ``text`` under ``digest`` unless something is already there; True if written.

        Contents are addressed by hash, so an existing object is this text: never rewritten.
        """
        path = self.path_of(digest)
        if self.fs.exists(path):
            return False
        folder = posixpath.dirname(path)
        if folder not in self._made:
            self.fs.makedirs(folder, exist_ok=True)
            self._made.add(folder)
        with self.fs.open(path, "wb") as handle:
            handle.write(text.encode("utf-8", "surrogatepass"))
        return True

    def put(self, text: str) -> str:
        """Store ``text`` under its own hash; the hash."""
        digest = content_hash(text)
        self.write(digest, text)
        return digest

    def __repr__(self) -> str:
        return f"RefStore({self.url!r})"


def open_store(url: str) -> RefStore:
    """The store at ``url``: a local directory path or any fsspec URL.

    Opening does not touch the store (it may not exist yet: the uploader creates it,
    a reader says it is missing when it first reads).

    Raises
    ------
    ContentStoreError
        An empty ``url``, an unknown protocol, or a protocol whose package is not installed.

    >>> open_store("memory://x").url
    'memory:///x'
    >>> open_store("nope://x")
    Traceback (most recent call last):
    ...
    memtrace_otel.content.store.ContentStoreError: content store 'nope://x': Protocol not known: nope
    """
    if not isinstance(url, str) or not url.strip():
        raise ContentStoreError("content store: empty path or URL")
    import fsspec  # lazily: 90 ms of imports that only a process using a store should pay

    try:
        fs, root = fsspec.url_to_fs(url.strip())
    except (ImportError, ValueError, TypeError, OSError) as error:
        raise ContentStoreError(f"content store {url[:200]!r}: {error}") from None
    return RefStore(fs, root)
