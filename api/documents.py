"""Result documents as the API reads them: fetched, hashed and parsed on a worker thread, once
per stored version.

A long video's document is megabytes of JSON. Parsed on the event loop, every result, WebVTT
or thumbnail request would stall the loop for as long; where the API runs in the service's
own process that loop also renews the video leases and heartbeats of the consumer. Here the
loop only awaits: the bytes are read, hashed and (unless the same bytes were parsed before)
decoded on a thread, and the parsed document is kept for the next request, by key and digest,
within a byte budget.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from storage.base import ObjectStore


@dataclass(frozen=True)
class StoredDocument:
    """One stored result document: the digest of its bytes (what ETags are made of) and the
    document parsed. Shared between requests: read it, never change it."""

    digest: bytes
    document: dict[str, Any]
    size: int  # bytes stored


class DocumentCache:
    """Parsed documents by object key, the most recently used first out of ``max_bytes``
    (counted in stored bytes)."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._max_bytes = max_bytes
        self._held = 0
        self._entries: OrderedDict[str, StoredDocument] = OrderedDict()
        self._lock = threading.Lock()  # reads run on worker threads
        self.parsed = 0  # documents decoded (not found in the cache)

    async def read(self, store: ObjectStore, key: str) -> StoredDocument | None:
        """The document under ``key``, None if there is none."""
        return await asyncio.to_thread(self._read, store, key)

    def _read(self, store: ObjectStore, key: str) -> StoredDocument | None:
        data = store.get_bytes(key)
        if data is None:
            return None
        digest = hashlib.sha256(data).digest()
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and cached.digest == digest:
                self._entries.move_to_end(key)
                return cached
        found = StoredDocument(digest, json.loads(data), len(data))
        with self._lock:
            self.parsed += 1
            self._put(key, found)
        return found

    def _put(self, key: str, found: StoredDocument) -> None:
        replaced = self._entries.pop(key, None)
        if replaced is not None:
            self._held -= replaced.size
        if found.size > self._max_bytes:
            return  # parsed for this request only
        self._entries[key] = found
        self._held += found.size
        while self._held > self._max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._held -= dropped.size
