"""Image stage outputs a video takes from its earlier result instead of computing them again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from core.outputs import VideoOutput
from core.records import Chunk, EarlierResult, Frame, LocalVideo, ProbeInfo, VideoRef
from core.stage_names import IMAGE_EMBED
from runtime.executor import IngestItem, ReplayedChunk, closing
from stages.pipeline import Lineage


@dataclass(frozen=True)
class ReusePlan:
    """Which image stages' outputs are taken from a video's earlier result, and those outputs.

    A video done under an earlier pipeline version and processed again under a new one
    recomputes only the stages whose version changed (see ``stages.pipeline.Lineage``).
    """

    stages: frozenset[str]  # the image stages whose outputs are taken
    fields: tuple[str, ...]  # the ``Frame`` fields those stages fill
    frames: dict[int, Frame]  # the earlier result's frames by index
    probe: ProbeInfo | None
    chunk_size: Callable[[ProbeInfo], int]  # as the decoder cuts a video's chunks
    # The embeddings are taken too: the outputs of every image stage that gives text are, and
    # the embedder is the same (a video given speech recognition, or only a new image
    # embedder, say, is not embedded again).
    embeddings: bool = False
    # The video stages' outputs taken (``runtime.video_stages``), by stage.
    outputs: Mapping[str, VideoOutput] = field(default_factory=dict)

    @classmethod
    def plan(
        cls, lineage: Lineage, ref: VideoRef, earlier: EarlierResult | None, stages: Collection[str]
    ) -> ReusePlan:
        reused: frozenset[str] = frozenset()
        outputs: dict[str, VideoOutput] = {}
        if earlier is not None and earlier.uri == ref.uri and earlier.probe is not None:
            reused = lineage.reusable(earlier.stage_versions) & frozenset(stages)
            taken = lineage.video_reusable(earlier.stage_versions)
            outputs = {name: out for name, out in earlier.outputs.items() if name in taken}
            if IMAGE_EMBED in reused and not _image_embedded(earlier.frames):
                reused -= {IMAGE_EMBED}  # its vectors are not in the sinks (any more)
        embeddings = (
            earlier is not None
            and lineage.text_stages & frozenset(stages) <= reused
            and lineage.embeddings_reusable(earlier.stage_versions)
            and all(f.embedding is not None for f in earlier.frames if f.text)
        )
        fields = tuple(f for stage in sorted(reused) for f in lineage.fills[stage])
        return cls(
            stages=reused,
            fields=(*fields, "embedding") if embeddings else fields,
            frames={f.index: f for f in earlier.frames} if reused and earlier else {},
            probe=earlier.probe if earlier else None,
            chunk_size=lineage.chunk_size,
            embeddings=embeddings,
            outputs=outputs,
        )

    def needs_pixels(self, stages: Collection[str]) -> bool:
        return not stages or bool(set(stages) - self.stages)

    def fill(self, chunk: Chunk) -> Chunk | None:
        """The chunk with the taken fields copied in; None if a frame is not in the earlier
        result (the same sampling makes the same frames, so this is only a safeguard)."""
        if not self.stages:
            return chunk
        frames: list[Frame] = []
        for frame in chunk.frames:
            found = self.frames.get(frame.index)
            if found is None or round(found.timestamp_s, 3) != round(frame.timestamp_s, 3):
                return None
            frames.append(frame.with_outputs({f: found.output(f) for f in self.fields}))
        return replace(chunk, frames=frames)

    async def replay(
        self, ref: VideoRef, after: AsyncIterator[IngestItem] | None = None
    ) -> AsyncIterator[IngestItem]:
        """The earlier result's frames as the decoder would chunk them, with no pixels: what
        the ingest stream yields when no stage needs pixels. ``after``: a stream that fetches
        the video without decoding it (for its speech), yielded first."""
        assert self.probe is not None
        if after is None:
            yield LocalVideo(ref=ref, path="", probe=self.probe)
        else:
            async with closing(after):
                async for item in after:
                    yield item
        ordered = [
            f if self.embeddings else replace(f, embedding=None)
            for _, f in sorted(self.frames.items())
        ]
        size = self.chunk_size(self.probe)
        starts = range(0, len(ordered), size) if ordered else range(1)
        for index, start in enumerate(starts):
            frames = ordered[start : start + size]
            last = start + size >= len(ordered)
            chunk = Chunk(ref.video_id, index, frames, last=last)
            yield ReplayedChunk(ref.video_id, index, len(frames), last, chunk)


def _image_embedded(frames: list[Frame]) -> bool:
    """Whether every analysed frame has its image embedding (repeats take their original's)."""
    return all(f.image_embedding is not None for f in frames if f.repeat_of is None)
