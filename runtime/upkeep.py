"""Upkeep of what the service keeps between videos: nothing left in between, nothing left over.

Every ``runtime.sweep_every_s`` each service process (each look handed to one process at a time
where it matters):

- **Records left in between are sent through again.** A record stays ``running`` for ever when
  its final transition was lost after its offset was committed: a Redis failover to a replica
  that had not received it (without ``redis.replicas_to_confirm``), or a restore from an older
  backup. Its event is never read again, so nothing would finish it and no webhook would go
  out. The store hands out the records left queued or running with no live owner for
  ``runtime.sweep_after_s`` (``lapsed``, once per period), and the event each record kept is
  published to its lane's topic: the video goes through the consumer and the same claim as any
  event, and is finished, skipped or rebuilt from the sinks like a replay.
- **Redis stops growing once retention has caught up.** Index entries whose record expired
  (``redis.finished_retention_s``) are dropped; so are webhook dead letters and endpoint states
  older than ``notify.log_retention_s``.
- **Persisted chunks left behind are removed:** those of a video finished, failed or now
  running under another pipeline version (their removal failed, or the version changed), and
  those of a video without a record once untouched for ``runtime.sweep_after_s`` (a record lost
  with Redis is rebuilt from them when its event comes again soon after, not a day later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime, timedelta

from checkpoint.base import VideoState
from checkpoint.chunk_store import ChunkStore
from checkpoint.redis_store import RedisCheckpointStore
from consumers.events import VideoUploaded
from consumers.publishing import publish_once
from core.config import ServiceConfig
from core.errors import ReelsenseError
from core.records import BULK_LANE, VideoRef
from notify.base import DeliveryLog

log = logging.getLogger(__name__)

_BATCH = 100  # lapsed records per look
_IN_HAND = (VideoState.QUEUED, VideoState.RUNNING)


class Upkeep:
    """The looks above; ``run`` until stopped, or one at a time (``sweep``, ``prune``,
    ``sweep_chunks``)."""

    def __init__(
        self,
        store: RedisCheckpointStore,
        config: ServiceConfig,
        *,
        delivery_log: DeliveryLog | None = None,
        chunks: ChunkStore | None = None,
    ) -> None:
        self._store = store
        self._kafka = config.kafka
        self._settings = config.runtime
        self._retention_s = config.redis.finished_retention_s
        self._log_retention_s = config.notify.log_retention_s
        self._delivery_log = delivery_log
        self._chunks = chunks
        self.sent = 0  # events sent through again since start

    async def run(self, stopping: asyncio.Event) -> None:
        """At start, then every ``runtime.sweep_every_s`` (never when it is None)."""
        every = self._settings.sweep_every_s
        if every is None:
            return
        while not stopping.is_set():
            await self.sweep()
            await self.prune()
            await self.sweep_chunks()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=every)

    async def sweep(self) -> int:
        """Lapsed records' events published; how many. Failures are logged (the next look
        tries again: a record is handed out once per ``sweep_after_s``)."""
        try:
            lapsed = await self._store.lapsed(idle_s=self._settings.sweep_after_s, limit=_BATCH)
        except ReelsenseError as exc:
            log.warning("sweep skipped, the store is unreachable (%s): %s", exc.code, exc)
            return 0
        sent = 0
        for ref in lapsed:
            try:
                await self._send(ref)
            except ReelsenseError as exc:
                log.warning("video %s left in between, not sent again: %s", ref.video_id, exc)
                continue
            log.warning("video %s left in between, no owner: sent through again", ref.video_id)
            sent += 1
        self.sent += sent
        return sent

    async def prune(self) -> int:
        """Index entries of expired records, old dead letters and endpoint states; how many."""
        pruned = 0
        try:
            if self._retention_s is not None:
                pruned += await self._store.prune_indexes(older_than_s=self._retention_s)
            if self._delivery_log is not None:
                before = datetime.now(UTC) - timedelta(seconds=self._log_retention_s)
                pruned += await self._delivery_log.prune(before)
        except ReelsenseError as exc:
            log.warning("prune skipped (%s): %s", exc.code, exc)
        return pruned

    async def sweep_chunks(self) -> int:
        """Persisted chunks left behind, removed; how many groups (video and version)."""
        chunks = self._chunks
        if chunks is None:
            return 0
        removed = 0
        try:
            left = await asyncio.to_thread(chunks.left)
            for (video_id, version), at in left.items():
                if await self._kept(video_id, version, at):
                    continue
                await asyncio.to_thread(chunks.delete_video, video_id, version)
                removed += 1
        except ReelsenseError as exc:
            log.warning("chunk sweep stopped (%s): %s", exc.code, exc)
        if removed:
            log.info("removed the persisted chunks of %d videos left behind", removed)
        return removed

    async def _kept(self, video_id: str, version: str, at: float) -> bool:
        record = await self._store.get(video_id)
        if record is None:
            return time.time() - at < self._settings.sweep_after_s
        return record.pipeline_version == version and record.status in _IN_HAND

    async def _send(self, ref: VideoRef) -> None:
        event = VideoUploaded(
            video_id=ref.video_id,
            uri=ref.uri,
            tenant=ref.tenant,
            callback_url=ref.callback_url,
            metadata=ref.metadata,
        )
        kafka = self._kafka
        if ref.lane == BULK_LANE and kafka.bulk_topic is not None:
            kafka = kafka.model_copy(update={"topic": kafka.bulk_topic})
        await publish_once(kafka, event.to_bytes(), key=ref.video_id.encode(), what="upkeep")
