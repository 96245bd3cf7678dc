"""The object-store interface: bytes under relative, "/"-separated keys."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from storage.errors import StoreRejected


def check_key(key: str) -> str:
    """``key`` if it is a safe relative path; StoreRejected otherwise."""
    parts = key.split("/")
    if not key or key.startswith("/") or "\\" in key or any(p in ("", ".", "..") for p in parts):
        raise StoreRejected(f"invalid object key {key!r}", code="sink_bad_key")
    return key


class ObjectStore(ABC):
    """Bytes under keys. Writes replace whole objects atomically; a reader never sees half."""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> None: ...

    @abstractmethod
    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> None:
        """The file at ``path`` as the object ``key``, streamed (never whole in memory), so a
        video of several GB goes in as well. A missing or unreadable ``path`` raises its
        ``OSError`` as it is: that is the caller's file, not the store, failing."""

    @abstractmethod
    def uri(self, key: str) -> str:
        """Where ``key`` is, as a URI another process can open (``s3://``, ``file://``)."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None if there is no such object."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys starting with ``prefix``, sorted."""

    @abstractmethod
    def modified(self, prefix: str = "") -> dict[str, float]:
        """Keys starting with ``prefix``, each with when it was last written (seconds since
        the epoch): for upkeep that removes what was left behind long enough ago."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""
