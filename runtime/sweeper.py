"""The sweeper: events of videos left in between sent through again.

A record stays ``running`` for ever when its final transition was lost after its offset was
committed: a Redis failover to a replica that had not received the transition (without
``redis.replicas_to_confirm``), or a restore from an older backup. Its event is never read
again, so nothing would finish it and no webhook would go out. Every ``runtime.sweep_every_s``
each service process asks the store for the records left queued or running with no live owner
for ``runtime.sweep_after_s`` (``CheckpointStore.lapsed``, which hands each record to one
sweeper per period) and publishes the event each record kept to its lane's topic: the video
then goes through the consumer and the same claim as any event, and is finished, skipped or
rebuilt from the sinks like a replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from checkpoint.redis_store import RedisCheckpointStore
from consumers.events import VideoUploaded
from core.config import KafkaSettings, RuntimeSettings
from core.errors import ReelsenseError
from core.records import BULK_LANE, VideoRef

log = logging.getLogger(__name__)

_BATCH = 100  # records per look


class RecordSweeper:
    """Sends lapsed records' events through again; ``run`` until stopped."""

    def __init__(
        self, store: RedisCheckpointStore, kafka: KafkaSettings, settings: RuntimeSettings
    ) -> None:
        self._store = store
        self._kafka = kafka
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None
        self.sent = 0  # events sent through again since start

    async def run(self, stopping: asyncio.Event) -> None:
        every = self._settings.sweep_every_s
        if every is None:
            return
        try:
            while not stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), timeout=every)
                if not stopping.is_set():
                    await self.sweep()
        finally:
            await self.close()

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def sweep(self) -> int:
        """One look: the lapsed records' events published; how many. Failures are logged
        (the next look tries again: a record is handed out once per ``sweep_after_s``)."""
        try:
            lapsed = await self._store.lapsed(idle_s=self._settings.sweep_after_s, limit=_BATCH)
        except ReelsenseError as exc:
            log.warning("sweep skipped, the store is unreachable (%s): %s", exc.code, exc)
            return 0
        sent = 0
        for ref in lapsed:
            try:
                await self._send(ref)
            except (KafkaError, OSError, TimeoutError) as exc:
                log.warning("video %s left in between, not sent again: %r", ref.video_id, exc)
                continue
            log.warning(
                "video %s was left in between with no owner: sent through again", ref.video_id
            )
            sent += 1
        self.sent += sent
        return sent

    async def _send(self, ref: VideoRef) -> None:
        event = VideoUploaded(
            video_id=ref.video_id,
            uri=ref.uri,
            tenant=ref.tenant,
            callback_url=ref.callback_url,
            metadata=ref.metadata,
        )
        topic = self._kafka.topic
        if ref.lane == BULK_LANE and self._kafka.bulk_topic is not None:
            topic = self._kafka.bulk_topic
        producer = await self._started()
        async with asyncio.timeout(self._kafka.request_timeout_ms / 1000 + 5):
            await producer.send_and_wait(topic, event.to_bytes(), key=ref.video_id.encode())

    async def _started(self) -> AIOKafkaProducer:
        if self._producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self._kafka.bootstrap,
                client_id=f"{self._kafka.client_id}-sweeper",
                acks="all",
                enable_idempotence=False,
                request_timeout_ms=self._kafka.request_timeout_ms,
            )
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self._producer = producer
        return self._producer
