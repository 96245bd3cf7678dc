"""A video decoded in ranges: together they yield exactly what one decoder yields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.records import Chunk
from stages.decode import DecodeSampleStage
from stages.sampling import ResumePoint
from tests.stages import media
from tests.stages.test_decode import LIMITS, local, settings
from tests.stages.test_decode_resume import resume_after


def decoded_in_ranges(
    stage: DecodeSampleStage, path: Path, parts: int, start: ResumePoint | None = None
) -> tuple[int, list[Chunk]]:
    video = local(path)
    ranges = stage.ranges(video, start, parts, min_s=1.0)
    chunks = [c for r in ranges for c in stage.stream_from(video, r.start, r.end_chunk)]
    return len(ranges), chunks


def assert_same_chunks(got: list[Chunk], want: list[Chunk]) -> None:
    assert [(c.index, c.last) for c in got] == [(c.index, c.last) for c in want]
    for a_chunk, b_chunk in zip(got, want, strict=True):
        assert [f.index for f in a_chunk.frames] == [f.index for f in b_chunk.frames]
        assert [f.timestamp_s for f in a_chunk.frames] == [f.timestamp_s for f in b_chunk.frames]
        for a, b in zip(a_chunk.frames, b_chunk.frames, strict=True):
            assert (a.repeat_of, a.boundaries, a.thumbnail is None) == (
                b.repeat_of,
                b.boundaries,
                b.thumbnail is None,
            )
            if a.image is not None or b.image is not None:
                assert a.image is not None
                assert b.image is not None
                assert np.abs(a.image.astype(int) - b.image.astype(int)).mean() < 1.0


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize(
    ("gop", "nonref"), [(12, False), (250, False), (250, True)], ids=["gop12", "gop250", "nonref"]
)
def test_ranges_together_equal_one_decoder(
    tmp_path: Path, gop: int, nonref: bool, parts: int
) -> None:
    # Long enough that each range after the first pays for its warm-up (5.2 s of video decoded
    # ahead of it for the shot detector) and three ranges still end sooner than two.
    path = media.write_clip(tmp_path / "clip.mp4", seconds=30.0, fps=25, gop=gop)
    stage = DecodeSampleStage(
        settings(sample_fps=2.0, chunk_frames=3, skip_nonref_frames=nonref), LIMITS
    )
    whole = list(stage.stream(local(path)))
    count, chunks = decoded_in_ranges(stage, path, parts)
    assert count == parts
    assert_same_chunks(chunks, whole)


def test_a_stream_with_gaps_is_split_where_its_samples_fall(tmp_path: Path) -> None:
    # A screen recording's kind of clock: frames only when something changed, with seconds
    # of nothing between. Splitting by time alone would take samples twice or not at all.
    times: list[float] = []
    for offset in (0.0, 17.0, 34.0):
        times += [offset + i * 0.1 for i in range(30)] + [offset + 6.0 + i * 0.1 for i in range(20)]
        times += [offset + 11.5 + i * 0.5 for i in range(10)]
    path = media.write_vfr_clip(tmp_path / "vfr.mp4", times, gop=10)
    stage = DecodeSampleStage(settings(sample_fps=2.0, chunk_frames=2), LIMITS)
    whole = list(stage.stream(local(path)))
    count, chunks = decoded_in_ranges(stage, path, 3)
    assert count == 3
    assert_same_chunks(chunks, whole)


def test_a_resumed_video_is_split_from_its_resume_point(tmp_path: Path) -> None:
    path = media.write_clip(tmp_path / "clip.mp4", seconds=9.0, fps=25, gop=12)
    stage = DecodeSampleStage(settings(sample_fps=2.0, chunk_frames=3), LIMITS)
    whole = list(stage.stream(local(path)))
    count, chunks = decoded_in_ranges(stage, path, 2, start=resume_after(whole[1]))
    assert count == 2
    assert_same_chunks(chunks, whole[2:])


@pytest.mark.parametrize("mode", ["shots", "keyframes"])
def test_modes_that_sample_by_picture_are_not_split(tmp_path: Path, mode: str) -> None:
    path = media.write_clip(tmp_path / "clip.mp4", seconds=9.0, fps=25, gop=12)
    stage = DecodeSampleStage(settings(sample_mode=mode, sample_fps=2.0, chunk_frames=3), LIMITS)
    assert decoded_in_ranges(stage, path, 3)[0] == 1


def test_a_short_video_stays_whole(tmp_path: Path) -> None:
    path = media.write_clip(tmp_path / "clip.mp4", seconds=9.0, fps=25, gop=12)
    stage = DecodeSampleStage(settings(sample_fps=2.0, chunk_frames=3), LIMITS)
    # Ranges of at least 5 s of a 9 s video: one.
    assert len(stage.ranges(local(path), None, 3, min_s=5.0)) == 1
