"""The checkpoint store on Redis: one hash per video, moved only by Lua scripts.

Every state transition is one script (``redis_*.lua`` beside this module), so a transition,
its index updates, its progress event and, for the final ones, its outbox entry happen in one
atomic step. Writes after ``claim`` are fenced by the owner epoch inside the script. The key
layout and the record format are described in ``checkpoint/scripts.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from checkpoint.base import (
    CheckpointStore,
    Claim,
    OutboxEvent,
    ProgressEvent,
    ReviewOutcome,
    ReviewQueue,
    VideoState,
    VideoStatus,
)
from checkpoint.durability import Durability, DurabilityMode
from checkpoint.errors import CheckpointLost, StaleEpoch, VideoBusy, VideoIdTaken
from checkpoint.redis_clients import async_client, retrying
from checkpoint.redis_lists import list_page
from checkpoint.redis_outbox import RedisOutbox
from checkpoint.redis_review import RedisReviewQueue, outcome_json
from checkpoint.redis_wire import ProgressSubscription, boundary
from checkpoint.scripts import (
    SCRIPTS,
    fields_from_pairs,
    load_script,
    record_from_fields,
    ref_from_json,
    ref_json,
)
from core.config import RedisSettings
from core.records import VideoRef

log = logging.getLogger(__name__)


class RedisCheckpointStore(CheckpointStore):
    """``CheckpointStore`` on Redis (standalone, or Cluster with a hash-tagged key prefix).

    Durability: ``mark_done``/``mark_failed``, and ``claim`` when it answers skip, return once
    the final transition is on disk, as far as the server promises: ``checkpoint/durability.py``.
    """

    def __init__(self, settings: RedisSettings, *, client: aioredis.Redis | None = None) -> None:
        """``client``, when given, must use ``decode_responses=True``; it is not closed here."""
        self._settings = settings
        self._owns_client = client is None
        # Every script is safe to repeat: a retried final transition is a no-op and a retried
        # claim only skips an epoch nobody used.
        self._redis = client or async_client(
            settings, decode_responses=True, protocol=2, retry=retrying()
        )
        prefix = settings.key_prefix
        self._prefix = prefix
        self._outbox = f"{prefix}:outbox"
        self._progress_stream = f"{prefix}:progress:stream"
        self._channel = f"{prefix}:progress"
        self._scripts: dict[str, AsyncScript] = {
            name: self._redis.register_script(load_script(name)) for name in SCRIPTS
        }
        self._outbox_reads = RedisOutbox(self._redis, self._outbox, settings)
        self._lapsed = self._redis.register_script(load_script("lapsed", alone=True))
        self._prune = self._redis.register_script(load_script("prune", alone=True))
        retention = settings.finished_retention_s
        self._retention_ms = 0 if retention is None else max(1, round(retention * 1000))
        self._durability = Durability(self._redis, settings)
        self._reviews = RedisReviewQueue(self._redis, prefix, self.video_key, self._run_final)

    @classmethod
    def from_url(cls, url: str, *, key_prefix: str = "rs", **settings: Any) -> RedisCheckpointStore:
        """A store on ``url`` with every key under ``{key_prefix}:``."""
        return cls(RedisSettings(url=url, key_prefix=key_prefix, **settings))

    def video_key(self, video_id: str) -> str:
        return f"{self._prefix}:video:{video_id}"

    async def _run(self, name: str, video_id: str, *args: str | int) -> Any:
        keys = [self.video_key(video_id), self._progress_stream, self._outbox]
        argv = [self._prefix, self._settings.progress_stream_maxlen, video_id, *args]
        async with boundary():
            return await self._scripts[name](keys=keys, args=argv)

    @staticmethod
    def _refuse(reply: list[Any], video_id: str, epoch: int | None) -> None:
        tag = reply[0]
        if tag == "missing":
            # The record is gone (Redis lost its data): not a newer owner. Retrying claims
            # the video afresh; the sinks and persisted outputs keep the work already done.
            raise CheckpointLost(f"{video_id}: no checkpoint record holds epoch {epoch}")
        if tag == "stale":
            raise StaleEpoch(
                f"{video_id}: epoch {epoch} may not write; the record is {reply[2]} "
                f"at epoch {reply[1]}"
            )

    # -- transitions ---------------------------------------------------------------------

    async def mark_queued(self, ref: VideoRef, pipeline_version: str) -> VideoStatus:
        reply = await self._run(
            "mark_queued",
            ref.video_id,
            ref.tenant,
            ref.uri,
            pipeline_version,
            ref.lane,
            ref_json(ref),
            "" if ref.sent_ms is None else ref.sent_ms,
        )
        _refuse_other_tenant(reply, ref)
        return record_from_fields(fields_from_pairs(reply))

    async def claim(
        self,
        ref: VideoRef,
        pipeline_version: str,
        *,
        owner: str = "",
        lease_s: float = 0.0,
        lost_epoch: int | None = None,
    ) -> Claim:
        lease_ms = round(lease_s * 1000)
        lost = "" if lost_epoch is None else lost_epoch
        args = (ref.tenant, ref.uri, pipeline_version, owner, lease_ms, lost)
        reply = await self._run("claim", ref.video_id, *args)
        _refuse_other_tenant(reply, ref)
        if reply[0] == "busy":
            raise VideoBusy(
                f"{ref.video_id}: {reply[1]} works on it for {int(reply[2]) / 1000:.1f}s more",
                retry_after=int(reply[2]) / 1000,
            )
        skip, record = reply
        if int(skip):  # the offset is committed on this answer: the transition must be on disk
            await self._durability.confirm()
        status = record_from_fields(fields_from_pairs(record))
        return Claim(epoch=status.epoch, skip=bool(int(skip)), status=status)

    async def renew(self, video_id: str, epoch: int, *, lease_s: float) -> None:
        reply = await self._run("renew", video_id, epoch, round(lease_s * 1000))
        self._refuse(reply, video_id, epoch)

    async def advance(
        self,
        video_id: str,
        epoch: int,
        stage: str,
        done: int,
        total: int | None = None,
        *,
        applicable: bool = True,
    ) -> None:
        args = (stage, done, "" if total is None else total, int(applicable))
        reply = await self._run("advance", video_id, epoch, *args)
        self._refuse(reply, video_id, epoch)

    async def chunks_done(self, video_id: str) -> set[int]:
        async with boundary():
            fields = await self._redis.hkeys(self.video_key(video_id))
        names = [f.decode() if isinstance(f, bytes) else f for f in fields]
        return {int(name[2:]) for name in names if name.startswith("c:")}

    async def mark_chunk(
        self, video_id: str, epoch: int, index: int, *, restored: bool, total: int | None
    ) -> None:
        kind = "restored" if restored else "processed"
        reply = await self._run(
            "mark_chunk", video_id, epoch, index, kind, "" if total is None else total
        )
        self._refuse(reply, video_id, epoch)

    async def mark_done(
        self,
        video_id: str,
        epoch: int,
        *,
        frames: int,
        timings: Mapping[str, float],
        outbox: OutboxEvent | None,
        also: Sequence[OutboxEvent] = (),
        review: ReviewOutcome | None = None,
    ) -> None:
        reply = await self._run_final(
            "mark_done",
            video_id,
            epoch,
            frames,
            json.dumps({stage: float(seconds) for stage, seconds in timings.items()}),
            outbox.model_dump_json() if outbox else "",
            self._retention_ms,
            json.dumps([event.model_dump_json() for event in also]),
            "" if review is None else review.decision,
            "" if review is None else outcome_json(review),
        )
        self._refuse(reply, video_id, epoch)

    async def mark_failed(
        self,
        ref: VideoRef,
        epoch: int | None,
        *,
        code: str,
        message: str,
        pipeline_version: str,
        stage: str | None,
        outbox: OutboxEvent | None,
    ) -> bool:
        reply = await self._run_final(
            "mark_failed",
            ref.video_id,
            "" if epoch is None else epoch,
            ref.tenant,
            ref.uri,
            pipeline_version,
            code,
            message,
            stage or "",
            outbox.model_dump_json() if outbox else "",
            self._retention_ms,
        )
        if reply[0] == "known":
            return False
        self._refuse(reply, ref.video_id, epoch)
        return True

    async def mark_deleted(
        self, video_id: str, *, tenant: str | None, asked_ms: int, outbox: OutboxEvent | None
    ) -> bool:
        retention = self._settings.deleted_retention_s
        reply = await self._run_final(
            "mark_deleted",
            video_id,
            tenant or "",
            asked_ms,
            outbox.model_dump_json() if outbox else "",
            0 if retention is None else max(1, round(retention * 1000)),
        )
        if reply[0] == "taken":
            raise VideoIdTaken(f"video id {video_id!r} belongs to another tenant")
        return bool(reply[0] == "ok")

    async def event_of(self, video_id: str) -> VideoRef | None:
        async with boundary():
            raw = await self._redis.hget(self.video_key(video_id), "event")
        return None if raw is None else ref_from_json(str(raw))

    async def give_back(
        self, owner: VideoRef, epoch: int, *, pipeline_version: str, frames: int
    ) -> None:
        reply = await self._run_final(
            "give_back",
            owner.video_id,
            epoch,
            owner.tenant,
            owner.uri,
            pipeline_version,
            frames,
            self._retention_ms,
        )
        self._refuse(reply, owner.video_id, epoch)

    async def _run_final(self, name: str, video_id: str, *args: str | int) -> Any:
        keys = [self.video_key(video_id), self._progress_stream, self._outbox]
        argv = [self._prefix, self._settings.progress_stream_maxlen, video_id, *args]
        return await self._durability.run_final(self._scripts[name], keys, argv)

    async def lapsed(self, *, idle_s: float, limit: int = 100) -> list[VideoRef]:
        """The events of records left queued or running with no live owner for ``idle_s``
        (a running one's lease lapsed), each returned once per ``idle_s``."""
        async with boundary():
            found = await self._lapsed(
                keys=[], args=[self._prefix, round(idle_s * 1_000_000), limit]
            )
        return [ref_from_json(event) for _, event in found]

    async def prune_indexes(self, *, older_than_s: float, limit: int = 1000) -> int:
        """Drop index entries older than ``older_than_s`` whose record is gone (up to
        ``limit`` looked at per index); how many went. Finished records expire on their own
        (``redis.finished_retention_s``); their entries in the lists' indexes do not."""
        async with boundary():
            now_s, now_us = await self._redis.time()
            before = int(now_s) * 1_000_000 + int(now_us) - round(older_than_s * 1_000_000)
            pruned = 0
            async for index in self._redis.scan_iter(match=f"{self._prefix}:idx:*", count=200):
                if await self._redis.type(index) != "zset":
                    continue
                pruned += int(await self._prune(keys=[index], args=[self._prefix, before, limit]))
        return pruned

    async def check_durability(self) -> DurabilityMode:
        """What the server promises; ``CheckpointNotDurable`` where too little (at start)."""
        return await self._durability.check()

    # -- reads ---------------------------------------------------------------------------

    async def get(self, video_id: str) -> VideoStatus | None:
        async with boundary():
            fields = await self._redis.hgetall(self.video_key(video_id))
        return record_from_fields(cast("dict[str, str]", fields)) if fields else None

    async def subscribe_progress(self) -> ProgressSubscription:
        """A subscription that is already listening when this returns (no event is missed
        between the call and the first read)."""
        pubsub = self._redis.pubsub()
        async with boundary():
            try:
                await pubsub.subscribe(self._channel)
            except BaseException:
                await pubsub.aclose()  # type: ignore[no-untyped-call]
                raise
        return ProgressSubscription(pubsub, health_s=self._settings.progress_health_s)

    async def progress(self) -> AsyncIterator[ProgressEvent]:
        subscription = await self.subscribe_progress()
        try:
            async for event in subscription:
                yield event
        finally:
            await subscription.aclose()

    # -- outbox --------------------------------------------------------------------------

    async def read_outbox(
        self, consumer: str, *, count: int = 16, block_ms: int = 1000
    ) -> list[tuple[str, OutboxEvent]]:
        return await self._outbox_reads.read(consumer, count=count, block_ms=block_ms)

    async def rewind_outbox(self, consumer: str) -> None:
        self._outbox_reads.rewind(consumer)

    async def reclaim_outbox(
        self, consumer: str, min_idle_ms: int, *, count: int = 16
    ) -> list[tuple[str, OutboxEvent]]:
        return await self._outbox_reads.reclaim(consumer, min_idle_ms, count=count)

    async def hold_outbox(self, consumer: str, entry_ids: list[str]) -> list[str]:
        return await self._outbox_reads.hold(consumer, entry_ids)

    async def ack_outbox(self, entry_ids: list[str]) -> None:
        await self._outbox_reads.ack(entry_ids)

    @property
    def reviews(self) -> ReviewQueue:
        return self._reviews

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()

    # Last in the class: below this point the name ``list`` means this method to mypy.
    async def list(
        self,
        *,
        status: VideoState | None = None,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[VideoStatus], str | None]:
        """Newest first by updated time, paged as ``checkpoint/redis_lists.py`` says."""
        return await list_page(
            self._redis,
            self._prefix,
            self.video_key,
            status=status,
            tenant=tenant,
            limit=limit,
            cursor=cursor,
        )


def _refuse_other_tenant(reply: list[Any], ref: VideoRef) -> None:
    if reply and reply[0] == "taken":
        raise VideoIdTaken(f"video id {ref.video_id!r} belongs to another tenant")
