"""Taking a video down: a deletion event (or ``DELETE /v1/videos/{id}``) removes all of it.

1. Its record becomes a tombstone, with the ``video.deleted`` outbox entry, in one step: an
   attempt under way is fenced out there (its epoch is no longer the record's, so its next
   renewal stops it and its writes and final transition are refused), and an upload event sent
   before the deletion and replayed later does not bring the video back (one sent after it
   does). The tombstone is kept ``redis.deleted_retention_s``.
2. Every sink forgets it, through the one writer, after any write submitted before.
3. Its persisted chunks go, every pipeline version of them.
4. The tables purge its rows from disk within ``storage.deletion_max_s`` (``sinks.lance_purge``).

Steps 2 and 3 are idempotent: a deletion retried after a crash does them again.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from checkpoint.base import CheckpointStore, OutboxEvent
from checkpoint.chunk_store import ChunkStore
from core.records import VideoRef
from core.urls import redact_url
from runtime.results import ResultStore

log = logging.getLogger(__name__)


class VideoDeleter:
    """Deletes videos from the checkpoint store, the sinks and the persisted chunks."""

    def __init__(
        self, store: CheckpointStore, results: ResultStore, chunks: ChunkStore, version: str
    ) -> None:
        self._store = store
        self._results = results
        self._chunks = chunks
        self._version = version

    async def delete(
        self, video_id: str, *, tenant: str | None, asked_ms: int, reason: str | None = None
    ) -> bool:
        """Take the video down (``tenant``: the tenant asking, None for any); returns whether
        this call deleted it (False: it was deleted already, and is forgotten again).
        ``VideoIdTaken`` when it is another tenant's video."""
        record = await self._store.get(video_id)
        kept = await self._store.event_of(video_id)
        owner = record.tenant if record is not None else (tenant or "default")
        uri = kept.uri if kept is not None else (record.uri if record is not None else "")
        ref = VideoRef(
            video_id, uri, tenant=owner, callback_url=kept.callback_url if kept else None
        )
        outbox = OutboxEvent(
            type="video.deleted",
            video_id=video_id,
            tenant=owner,
            pipeline_version=record.pipeline_version if record else self._version,
            callback_url=ref.callback_url,
            epoch=record.epoch + 1 if record is not None else 1,
            data={"video_id": video_id, "tenant": owner, "uri": redact_url(uri), "reason": reason},
            timestamp=datetime.now(UTC),
        )
        first = await self._store.mark_deleted(
            video_id, tenant=tenant, asked_ms=asked_ms, outbox=outbox
        )
        await self._results.forget([ref])
        removed = await asyncio.to_thread(self._chunks.delete_all, video_id)
        log.warning(
            "video %s of tenant %s deleted%s (%d persisted chunks removed)",
            video_id,
            owner,
            "" if first else " again",
            removed,
        )
        return first
