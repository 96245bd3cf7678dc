"""Results built directly for the sink tests: no pipeline, random unit vectors."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from core.records import Frame, OcrLine, ProbeInfo, VideoRef, VideoResult

DIM = 384


def unit_vectors(count: int, dim: int = DIM, seed: int = 0) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, dim)).astype(np.float32)
    normalized: npt.NDArray[np.float32] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return normalized


def probe(duration_s: float = 10.0) -> ProbeInfo:
    return ProbeInfo(
        container="mov,mp4,m4a,3gp,3g2,mj2",
        codec="h264",
        width=1280,
        height=720,
        fps=25.0,
        duration_s=duration_s,
        video_streams=1,
        audio_streams=0,
        size_bytes=123_456,
    )


def make_result(
    video_id: str,
    *,
    frames: int = 20,
    tenant: str = "default",
    version: str = "v1",
    dim: int = DIM,
    seed: int = 0,
    texts: list[str] | None = None,
    vectors: npt.NDArray[np.float32] | None = None,
    embed: bool = True,
    step_s: float = 0.5,
) -> VideoResult:
    """A result of ``frames`` frames, each with one OCR line and (if ``embed``) an embedding."""
    texts = texts if texts is not None else [f"{video_id} says {i}" for i in range(frames)]
    if vectors is None and embed:
        vectors = unit_vectors(frames, dim, seed)
    built = []
    for i in range(frames):
        line = OcrLine(text=texts[i], score=0.9, box=((0, 0), (10, 0), (10, 5), (0, 5)))
        built.append(
            Frame(
                index=i,
                timestamp_s=round(i * step_s, 3),
                image=None,
                keyframe=i == 0,
                ocr_lines=[line] if texts[i] else [],
                caption="",
                embedding=None if vectors is None else vectors[i],
            )
        )
    return VideoResult(
        ref=VideoRef(
            video_id=video_id,
            uri=f"file:///videos/{video_id}.mp4",
            tenant=tenant,
            metadata={"title": video_id},
        ),
        pipeline_version=version,
        probe=probe(frames * step_s),
        frames=built,
        completed_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        timings={"decode": 0.5, "ocr": 1.25},
    )


def with_image_vectors(result: VideoResult) -> VideoResult:
    """``result`` with each frame's embedding as its image vector too: random unit vectors
    stand in for an image model's."""
    for frame in result.frames:
        frame.image_embedding = frame.embedding
    return result
