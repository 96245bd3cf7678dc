"""The service side of the sinks: fenced writes, and what the sinks already hold."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from checkpoint.base import VideoState
from checkpoint.errors import StaleEpoch
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import EarlierResult, Frame, VideoRef, VideoResult
from models.embedding import text_embedder
from models.image_embedding import image_embedder
from sinks.base import Sink
from sinks.images import LanceImageIndex
from sinks.lance import LanceFrameSink, LanceSummarySink
from sinks.object_store import ResultDocumentSink, earlier_result
from sinks.writer import FINALS_KEPT, SinkWriter, WriterStats
from sinks.writer_lease import WriterLease

_S = TypeVar("_S", bound=Sink)


class FencedResultWriter:
    """Writes results through the one ``SinkWriter``, refusing those of stale attempts.

    A result carries the owner epoch of the attempt that made it; if the checkpoint record has
    moved on (a newer attempt took the video, or it is already final), the write is refused
    with ``StaleEpoch``. A record lost with Redis does not block the write: the rows are keyed
    and stamped with the pipeline version, so rewriting them is harmless.
    """

    def __init__(self, config: ServiceConfig) -> None:
        stages = config.stages
        text_model = text_embedder(stages.embed.model, threads=stages.embed.threads)
        image_model = image_embedder(stages)
        storage = config.storage
        # Every process and cluster on these tables brings its own writer: the lease lets
        # one of them commit at a time.
        lease = WriterLease.from_settings(storage, config.redis) if storage.writer_lease else None
        self._writer = SinkWriter.from_settings(
            storage, text_model=text_model, image_model=image_model, lease=lease
        )
        # What the sinks hold is read from the writer's own line-up: a table's reads open its
        # latest version each time (``LanceTable``), beside the one thread that writes it.
        sinks = self._writer.sinks
        self._summary = _only(sinks, LanceSummarySink)
        self._frames = _only(sinks, LanceFrameSink)
        self._documents = _only(sinks, ResultDocumentSink)
        images = [sink for sink in sinks if isinstance(sink, LanceImageIndex)]
        self._images = images[0] if images else None
        # The fence reads the records itself: in a writer replica no other client is at hand.
        self._store = RedisCheckpointStore(config.redis)
        # Video -> the epoch of its tombstone, for the videos deleted lately.
        self._forgotten: OrderedDict[str, int] = OrderedDict()

    @property
    def stats(self) -> WriterStats:
        return self._writer.stats

    async def write(self, result: VideoResult) -> None:
        await self._fence(result)
        self._refuse_forgotten(result)  # a deletion may have come while the fence was read
        await asyncio.wrap_future(self._writer.submit(result))

    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        """Queue parts of videos for the search index, to be written together (not waited
        for); parts of a stale attempt are dropped."""
        live = []
        for part in parts:
            try:
                await self._fence(part)
                self._refuse_forgotten(part)
            except StaleEpoch:
                continue
            live.append(part)
        self._writer.submit_partial(*live)

    async def drop_partial(self, video_id: str) -> None:
        self._writer.drop_partial(video_id)

    async def forget(self, videos: Sequence[VideoRef]) -> None:
        """Everything of ``videos`` removed from every sink (``SinkWriter.forget``). Their
        records are tombstones already, so no later write of theirs passes ``_fence``; one
        whose fence was read before the deletion is refused here by its epoch."""
        for video in videos:
            status = await self._store.get(video.video_id)
            self._forgotten[video.video_id] = status.epoch if status is not None else 0
            self._forgotten.move_to_end(video.video_id)
        while len(self._forgotten) > FINALS_KEPT:
            self._forgotten.popitem(last=False)
        await asyncio.wrap_future(self._writer.forget(videos))

    def _refuse_forgotten(self, result: VideoResult) -> None:
        deleted_at = self._forgotten.get(result.ref.video_id)
        if deleted_at is not None and (result.epoch or 0) < deleted_at:
            raise StaleEpoch(
                f"{result.ref.video_id}: results of epoch {result.epoch} refused; the video "
                f"was deleted at epoch {deleted_at}"
            )

    async def _fence(self, result: VideoResult) -> None:
        if result.epoch is not None:
            status = await self._store.get(result.ref.video_id)
            if status is not None and (
                status.epoch != result.epoch or status.status is not VideoState.RUNNING
            ):
                raise StaleEpoch(
                    f"{result.ref.video_id}: results of epoch {result.epoch} refused; the "
                    f"record is {status.status.value} at epoch {status.epoch}"
                )

    async def earlier(self, video_id: str) -> EarlierResult | None:
        """What the sinks hold of the video's latest result, if anything."""
        return await asyncio.to_thread(self._earlier, video_id)

    def _earlier(self, video_id: str) -> EarlierResult | None:
        row = self._summary.video_row(video_id)
        if row is None:
            return None
        version, frames, tenant = (
            str(row["pipeline_version"]),
            int(row["frames"]),
            str(row["tenant"]),
        )
        # The summary is written last, so the document of its version is there too (unless
        # removed by hand: then nothing is reused and the stages run again).
        document = self._documents.read(tenant, video_id, version)
        if document is None:
            return EarlierResult(pipeline_version=version, frame_count=frames, tenant=tenant)
        found = earlier_result(document, frames)
        return dataclasses.replace(found, tenant=tenant, frames=self._embedded(video_id, found))

    def _embedded(self, video_id: str, earlier: EarlierResult) -> list[Frame]:
        """The earlier result's frames with their embeddings, from the frames table and the
        frame image vectors' (the document holds none), where those hold the same version's
        rows."""
        rows = self._frames.frame_rows(video_id, with_embedding=True)
        frames = earlier.frames
        if all(row["pipeline_version"] == earlier.pipeline_version for row in rows):
            vectors = {
                int(row["frame_index"]): np.asarray(row["embedding"], dtype=np.float32)
                for row in rows
                if row["embedding"] is not None
            }
            frames = [dataclasses.replace(f, embedding=vectors.get(f.index)) for f in frames]
        if self._images is not None:
            pictured = self._images.vectors(video_id, earlier.pipeline_version)
            frames = [dataclasses.replace(f, image_embedding=pictured.get(f.index)) for f in frames]
        return frames

    async def close(self) -> None:
        await asyncio.to_thread(self._writer.close)  # its sinks too
        await self._store.close()


def _only(sinks: Sequence[Sink], kind: type[_S]) -> _S:
    """The sink of ``kind`` in the writer's line-up (``sinks.lineup``: exactly one)."""
    (found,) = (sink for sink in sinks if isinstance(sink, kind))
    return found
