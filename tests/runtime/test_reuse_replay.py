"""Replaying an earlier result (no stage needs pixels): chunks cut as the decoder cuts them."""

from __future__ import annotations

import asyncio

from core.config import ServiceConfig
from core.records import EarlierResult, Frame, ProbeInfo, VideoRef
from runtime.executor import ReplayedChunk
from runtime.reuse import ReusePlan
from stages.pipeline import Pipeline


def test_a_replay_cuts_the_chunks_the_decoder_would() -> None:
    pipeline = Pipeline.from_config(ServiceConfig.load(stages={"chunk_frames": 8}))
    lineage = pipeline.lineage
    probe = ProbeInfo("mp4", "h264", 1920, 1080, 30.0, 7.0, 1, 0, 210)  # 3 samples per chunk
    assert pipeline.decode.chunk_size(probe) == 3
    ref = VideoRef(video_id="v", uri="file:///videos/v.mp4")
    earlier = EarlierResult(
        pipeline_version=lineage.version,
        frame_count=7,
        uri=ref.uri,
        probe=probe,
        stage_versions=dict(lineage.versions),
        frames=[Frame(index=i, timestamp_s=float(i), image=None) for i in range(7)],
    )
    reuse = ReusePlan.plan(lineage, ref, earlier, [s.name for s in pipeline.image_stages])
    assert not reuse.needs_pixels([s.name for s in pipeline.image_stages])

    async def replayed() -> list[ReplayedChunk]:
        return [item async for item in reuse.replay(ref) if isinstance(item, ReplayedChunk)]

    tickets = asyncio.run(replayed())
    assert [(t.index, t.frames, t.last) for t in tickets] == [
        (0, 3, False),
        (1, 3, False),
        (2, 1, True),
    ]
    assert [f.index for t in tickets for f in t.chunk.frames] == list(range(7))
