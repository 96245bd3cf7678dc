"""Shot boundaries found while decoding, the ``shots`` sampling mode, and repeated samples."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image as PILImage

from checkpoint.chunk_store import decode_chunk, encode_chunk
from core.records import Frame, OcrLine
from devkit.edited_videos import EditTruth, Shot, write_edit
from devkit.samples import Scene, write_video
from stages.decode import DecodeSampleStage
from stages.shots import ShotDetector, signature
from tests.stages.test_decode import LIMITS, local, settings

TOLERANCE_S = 0.2


def frames_of(stage: DecodeSampleStage, path: Path) -> list[Frame]:
    return [frame for chunk in stage.stream(local(path)) for frame in chunk.frames]


def found(frames: list[Frame]) -> list[tuple[float, str]]:
    return [(b.timestamp_s, b.kind) for frame in frames for b in frame.boundaries]


@pytest.fixture(scope="module")
def edit(tmp_path_factory: pytest.TempPathFactory) -> EditTruth:
    """Cuts, a dissolve and a fade between still shots, a flash and a slow pan within shots."""
    shots = [
        Shot(3.0, seed=1),
        Shot(2.5, "cut", seed=2, flash_at_s=1.2),
        Shot(3.0, "dissolve", 1.0, seed=3),
        Shot(3.0, "fade", 1.0, seed=4, pan_px_per_s=40),
        Shot(2.5, "cut", seed=5),
    ]
    return write_edit(tmp_path_factory.mktemp("shots") / "edit.mp4", shots)


def test_cuts_and_transitions_are_found_and_flashes_are_not(edit: EditTruth) -> None:
    frames = frames_of(DecodeSampleStage(settings(sample_fps=1.0), LIMITS), edit.path)
    boundaries = found(frames)
    assert len(boundaries) == len(edit.boundaries), boundaries
    for (t, kind), (want_t, want_kind) in zip(boundaries, edit.boundaries, strict=True):
        assert abs(t - want_t) <= TOLERANCE_S, (boundaries, edit.boundaries)
        assert kind == ("cut" if want_kind == "cut" else "gradual")
    (flash,) = edit.flashes
    assert all(abs(t - flash) > 0.5 for t, _ in boundaries)
    # Each boundary is given to the first sample after it.
    for frame in frames:
        for boundary in frame.boundaries:
            assert boundary.timestamp_s <= frame.timestamp_s + 1e-6


def test_shots_mode_samples_every_shot_even_a_short_one(tmp_path: Path) -> None:
    shots = [Shot(3.0, seed=1), Shot(0.6, "cut", seed=2), Shot(3.0, "cut", seed=3)]
    truth = write_edit(tmp_path / "short.mp4", shots)
    rate = frames_of(DecodeSampleStage(settings(sample_fps=0.5), LIMITS), truth.path)
    by_shot = frames_of(
        DecodeSampleStage(settings(sample_mode="shots", sample_fps=0.5), LIMITS), truth.path
    )
    short_start, short_end = truth.boundaries[0][0], truth.boundaries[1][0]
    assert not [f for f in rate if short_start <= f.timestamp_s < short_end]
    inside = [f for f in by_shot if short_start <= f.timestamp_s < short_end]
    assert len(inside) == 1
    # The sample is the frame that confirmed the cut (one frame in), carrying the boundary.
    assert inside[0].timestamp_s == pytest.approx(short_start + 0.04, abs=1e-3)
    assert [b.kind for b in inside[0].boundaries] == ["cut"]
    # The rate's samples are all still there, and the indexes run on without a gap.
    assert {f.timestamp_s for f in rate} <= {f.timestamp_s for f in by_shot}
    assert [f.index for f in by_shot] == list(range(len(by_shot)))


def test_repeats_point_back_within_their_chunk_and_shot(edit: EditTruth) -> None:
    stage = DecodeSampleStage(settings(sample_fps=4.0, chunk_frames=5), LIMITS)
    chunks = list(stage.stream(local(edit.path)))
    repeated = 0
    for chunk in chunks:
        indexes = {frame.index: frame for frame in chunk.frames}
        assert chunk.frames[0].repeat_of is None  # the first sample of a chunk is analysed
        for frame in chunk.frames:
            if frame.repeat_of is None:
                assert frame.image is not None
                continue
            repeated += 1
            assert frame.image is None
            original = indexes[frame.repeat_of]  # KeyError if it points out of the chunk
            assert original.repeat_of is None
            assert original.index < frame.index
            between = [f for f in chunk.frames if original.index < f.index <= frame.index]
            assert not any(f.boundaries for f in between)  # no boundary in between
    assert repeated > len(chunks)  # still shots sampled 4 times a second mostly repeat


def test_repeats_take_the_findings_of_the_sample_they_repeat(edit: EditTruth) -> None:
    stage = DecodeSampleStage(settings(sample_fps=4.0, chunk_frames=5), LIMITS)
    chunk = next(c for c in stage.stream(local(edit.path)) if c.frames[1].repeat_of is not None)
    line = OcrLine("SEEN ONCE", 0.9, ((0, 0), (1, 0), (1, 1), (0, 1)))
    analysed = replace(
        chunk,
        frames=[
            replace(f, ocr_lines=[line], caption="a field") if f.repeat_of is None else f
            for f in chunk.frames
        ],
    )
    filled = analysed.with_repeats_filled(("ocr_lines", "caption"))
    assert all(f.ocr_lines == [line] and f.caption == "a field" for f in filled.frames)
    assert [f.repeat_of for f in filled.frames] == [f.repeat_of for f in chunk.frames]


def test_a_caption_appearing_is_not_a_repeat(tmp_path: Path) -> None:
    truth = write_edit(
        tmp_path / "caption.mp4", [Shot(4.0, seed=7, caption="EXIT 12", caption_from_s=1.5)]
    )
    frames = frames_of(DecodeSampleStage(settings(sample_fps=1.0), LIMITS), truth.path)
    assert [f.repeat_of for f in frames] == [None, 0, None, 2]


def test_without_repeats_every_sample_keeps_its_pixels(edit: EditTruth) -> None:
    stage = DecodeSampleStage(settings(sample_fps=4.0, repeat_max_change=0), LIMITS)
    frames = frames_of(stage, edit.path)
    assert all(f.repeat_of is None and f.image is not None for f in frames)
    assert "repeat_max_change" not in stage.version_params()


def test_without_detection_no_boundaries(edit: EditTruth) -> None:
    stage = DecodeSampleStage(settings(shot_detection=False), LIMITS)
    assert not found(frames_of(stage, edit.path))
    assert "shots" not in stage.version_params()


@pytest.mark.parametrize("pix_fmt", ["rgb24", "gray", "yuv420p10le", "nv12"])
def test_signature_of_any_pixel_format(pix_fmt: str) -> None:
    pixels = np.zeros((90, 160, 3), dtype=np.uint8)
    pixels[:, 80:] = (200, 40, 40)
    frame = av.VideoFrame.from_ndarray(pixels, format="rgb24").reformat(format=pix_fmt)
    sig = signature(frame)
    assert sig.shape == (3, 18, 32)
    assert sig[0, :, 20:].mean() != pytest.approx(sig[0, :, :12].mean(), abs=5)


def test_a_flash_is_not_a_cut_and_a_cut_is_one() -> None:
    still, other, white = (np.full((3, 18, 32), v, dtype=np.float32) for v in (60, 140, 255))
    detector = ShotDetector()
    seen = [detector.feed(i / 25, sig) for i, sig in enumerate([still] * 10 + [white] + [still])]
    assert not any(seen)
    seen = [detector.feed((12 + i) / 25, sig) for i, sig in enumerate([still] * 5 + [other] * 3)]
    cuts = [b for b in seen if b is not None]
    assert [(b.kind, round(b.timestamp_s, 2)) for b in cuts] == [("cut", 0.68)]


def test_each_shot_starts_with_a_thumbnail_that_survives_the_chunk_store(
    edit: EditTruth,
) -> None:
    stage = DecodeSampleStage(settings(sample_mode="shots"), LIMITS)
    chunks = list(stage.stream(local(edit.path)))
    frames = [frame for chunk in chunks for frame in chunk.frames]
    starts = {f.index for f in frames if f.index == 0 or f.boundaries}
    assert len(starts) == len(edit.boundaries) + 1
    for frame in frames:
        if frame.index not in starts:
            assert frame.thumbnail is None
            continue
        assert frame.thumbnail is not None
        assert frame.thumbnail.startswith(b"\xff\xd8")  # a JPEG
        assert PILImage.open(io.BytesIO(frame.thumbnail)).size == (320, 180)
    for chunk in chunks:
        restored = decode_chunk(encode_chunk(chunk.without_images()))
        assert [f.thumbnail for f in restored.frames] == [f.thumbnail for f in chunk.frames]
        assert [f.boundaries for f in restored.frames] == [f.boundaries for f in chunk.frames]
        assert [f.repeat_of for f in restored.frames] == [f.repeat_of for f in chunk.frames]


def test_a_faint_cut_is_a_cut(tmp_path: Path) -> None:
    """Navy to black changes too little for the cut test; the transition test finds it, with
    no frame in between, so it is a cut all the same (as in the demo's lecture video)."""
    scenes = [Scene(("人工智能",), 2.0, (20, 30, 90)), Scene(("QUESTIONS?",), 2.0, (15, 15, 15))]
    path = write_video(tmp_path / "faint.mp4", scenes, size=(320, 180))
    frames = frames_of(DecodeSampleStage(settings(), LIMITS), path)
    assert [(round(t, 2), kind) for t, kind in found(frames)] == [(2.0, "cut")]
