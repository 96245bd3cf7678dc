"""One actor of a backfill on Ray Data: the service's own per-video processing, in the actor.

Each actor runs a ``VideoProcessor`` over a ``LocalExecutor``: the stage classes the service's
pools run, the same checkpoint store (claims, leases, chunk checkpoints) and the same fenced
sink writer (``LocalResults``). So a video the service finished is skipped here and the
reverse, a video a killed backfill left half done resumes at its first unfinished chunk, and a
video whose stages have not changed since its result was written decodes nothing
(``runtime.reuse``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from checkpoint.chunk_store import ChunkStore
from checkpoint.redis_store import RedisCheckpointStore
from consumers.events import VideoUploaded
from core.config import ServiceConfig
from core.records import BULK_LANE
from runtime.local_executor import LocalExecutor
from runtime.processor import VideoProcessor
from runtime.results import LocalResults
from runtime.video_stages import VideoStages
from stages.decode import FRAMES_DECODED
from stages.pipeline import Pipeline
from storage.uri import object_store_from_uri

log = logging.getLogger(__name__)

#: The columns each processed row comes back with.
OUTCOME_COLUMNS = ("video_id", "where", "outcome", "reason", "frames_decoded", "started", "ended")


class BackfillWorker:
    """Processes the videos of each batch it is given, one after the other."""

    def __init__(self, config_json: str) -> None:
        config = ServiceConfig.model_validate_json(config_json)
        self._loop = asyncio.new_event_loop()
        self._executor = LocalExecutor(config)
        self._results = LocalResults(config)
        self._store = RedisCheckpointStore(config.redis)
        storage = config.storage
        pipeline = Pipeline.from_config(config)
        self._video_stages = VideoStages(pipeline.video_stages)
        self._processor = VideoProcessor(
            store=self._store,
            executor=self._executor,
            results=self._results,
            chunks=ChunkStore(object_store_from_uri(storage.object_store_uri, storage)),
            lineage=pipeline.lineage,
            settings=config.runtime,
            quiet_lanes=config.backfill.quiet_lanes,
            video_stages=self._video_stages,
        )

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        rows: dict[str, list[Any]] = {name: [] for name in OUTCOME_COLUMNS}
        for event, where in zip(batch["event"], batch["where"], strict=True):
            outcome = self._loop.run_until_complete(self._one(str(event), str(where)))
            for name in OUTCOME_COLUMNS:
                rows[name].append(outcome[name])
        return rows

    async def _one(self, event_json: str, where: str) -> dict[str, Any]:
        event = VideoUploaded.model_validate_json(event_json)
        ref = replace(event.to_ref(), lane=BULK_LANE)
        decoded, started = FRAMES_DECODED.count, time.time()
        reason = ""
        try:
            outcome = await self._processor.process(ref)
            if outcome == "failed":
                status = await self._store.get(ref.video_id)
                if status is not None:
                    reason = f"{status.error_code}: {status.error_message}"
        except Exception as exc:  # the store down, an id of another tenant, a bug
            log.exception("backfill of %s did not finish", ref.video_id)
            outcome, reason = "error", f"{type(exc).__name__}: {exc}"
        return {
            "video_id": ref.video_id,
            "where": where,
            "outcome": outcome,
            "reason": reason,
            "frames_decoded": FRAMES_DECODED.count - decoded,
            "started": started,  # time.time(): when this actor took the video, and let it go
            "ended": time.time(),
        }

    def __del__(self) -> None:
        try:
            self._loop.run_until_complete(self._video_stages.close())
            self._loop.run_until_complete(self._executor.close())
            self._loop.run_until_complete(self._results.close())
            self._loop.run_until_complete(self._store.close())
        except Exception:  # an actor going away; nothing left to save
            log.debug("backfill worker close failed", exc_info=True)
