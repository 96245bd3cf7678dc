"""Resuming decode at a chunk: the same frames, indexes and chunks as an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.records import Chunk
from stages.decode import DecodeSampleStage
from stages.sampling import ResumePoint
from tests.stages import media
from tests.stages.test_decode import LIMITS, local, settings


def resume_after(chunk: Chunk) -> ResumePoint:
    last = chunk.frames[-1]
    return ResumePoint(chunk.index + 1, last.index + 1, last.timestamp_s, finished=chunk.last)


@pytest.mark.parametrize(
    ("mode", "gop", "mpix", "size", "nonref"),
    [
        ("fps", 12, None, 3, False),
        ("fps", 250, None, 3, False),
        ("keyframes", 5, None, 3, False),
        ("fps", 12, 1.5, 2, False),
        ("shots", 50, None, 3, True),
    ],
    ids=["gop12", "gop250", "key", "budget", "nonref"],
)
def test_resumed_chunks_equal_the_uninterrupted_ones(
    tmp_path: Path, mode: str, gop: int, mpix: float | None, size: int, nonref: bool
) -> None:
    path = media.write_clip(tmp_path / "clip.mp4", seconds=8.0, fps=25, gop=gop)
    stage = DecodeSampleStage(
        settings(
            sample_mode=mode,
            sample_fps=2.0,
            chunk_frames=3,
            chunk_decode_mpix=mpix,
            skip_nonref_frames=nonref,
        ),
        LIMITS,
    )
    full = list(stage.stream(local(path)))
    assert len(full) >= 3
    # 320x180 at 25 fps sampled twice a second: 0.72 megapixels decoded per sample.
    assert {len(c.frames) for c in full[:-1]} == {size}
    for cut in range(len(full) - 1):
        resumed = list(stage.stream_from(local(path), resume_after(full[cut])))
        assert [c.index for c in resumed] == [c.index for c in full[cut + 1 :]]
        for got, want in zip(resumed, full[cut + 1 :], strict=True):
            assert got.last == want.last
            assert [f.index for f in got.frames] == [f.index for f in want.frames]
            assert [f.timestamp_s for f in got.frames] == [f.timestamp_s for f in want.frames]
            for a, b in zip(got.frames, want.frames, strict=True):
                assert (a.repeat_of, a.boundaries) == (b.repeat_of, b.boundaries)
                if a.repeat_of is None:
                    assert a.image is not None
                    assert b.image is not None
                    assert np.abs(a.image.astype(int) - b.image.astype(int)).mean() < 1.0


def test_a_finished_video_yields_nothing(tmp_path: Path) -> None:
    path = media.write_clip(tmp_path / "clip.mp4", seconds=3.0)
    stage = DecodeSampleStage(settings(sample_fps=1.0, chunk_frames=2), LIMITS)
    full = list(stage.stream(local(path)))
    assert list(stage.stream_from(local(path), resume_after(full[-1]))) == []
