"""The sequential runner: every stage in this process, one video after another, no Ray.

It runs the same stage classes as the service; unit tests and the baseline benchmark use it.
Each stage call takes one chunk of one video, so an error is always that video's own.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

from core.records import Chunk, VideoRef, VideoResult
from core.speech import Speech, heard
from core.stage_names import DECODE, FETCH
from stages.pipeline import Pipeline


class SequentialRunner:
    """Runs a pipeline's stages in order for each video."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline
        self._ready = False

    def setup(self) -> None:
        for stage in self._pipeline.stages:
            stage.setup()
        self._ready = True

    def teardown(self) -> None:
        for stage in self._pipeline.stages:
            stage.teardown()
        self._ready = False

    def run(self, refs: Iterable[VideoRef]) -> Iterator[VideoResult]:
        if not self._ready:
            self.setup()
        for ref in refs:
            yield self.run_one(ref)

    def run_one(self, ref: VideoRef) -> VideoResult:
        pipeline = self._pipeline
        timings: dict[str, float] = defaultdict(float)
        started = time.process_time()
        video = pipeline.fetch.process_batch([ref])[0]
        timings[FETCH] += time.process_time() - started
        frames = []
        speech: Speech | None = None
        try:
            chunks = pipeline.decode.stream(video)
            while True:
                mark = time.process_time()
                chunk = next(chunks, None)
                timings[DECODE] += time.process_time() - mark
                if chunk is None:
                    break
                frames.extend(self._enrich(chunk, timings).frames)
            if pipeline.speech is not None:
                mark = time.process_time()
                speech = heard(pipeline.speech.stream(video))
                timings[pipeline.speech.name] += time.process_time() - mark
        finally:
            pipeline.fetch.release(video)
        lineage = pipeline.lineage
        result = VideoResult(
            ref=ref,
            pipeline_version=lineage.version,
            probe=video.probe,
            frames=frames,
            completed_at=datetime.now(UTC),
            timings=dict(timings),  # CPU seconds of this process per stage
            stage_versions=lineage.versions,
            speech=speech,
        )
        for stage in pipeline.video_stages:  # each may read the outputs of those before it
            mark = time.process_time()
            (output,) = stage.process_batch([result])
            timings[stage.name] += time.process_time() - mark
            result = replace(result, outputs={**result.outputs, stage.name: output})
        return replace(result, timings=dict(timings))

    def _enrich(self, chunk: Chunk, timings: dict[str, float]) -> Chunk:
        for stage in self._pipeline.image_stages:
            mark = time.process_time()
            chunk = stage.process_batch([chunk])[0]
            timings[stage.name] += time.process_time() - mark
        chunk = chunk.without_images().with_repeats_filled(self._pipeline.lineage.analysed_fields)
        if self._pipeline.embed is not None:
            mark = time.process_time()
            chunk = self._pipeline.embed.process_batch([chunk])[0]
            timings[self._pipeline.embed.name] += time.process_time() - mark
        return chunk
