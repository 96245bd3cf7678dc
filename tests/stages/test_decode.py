"""DecodeSampleStage: sampling by presentation time, key frames, chunks, streaming, failures."""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from core.config import LimitSettings, StageSettings
from core.errors import ReelsenseError
from core.records import Chunk, LocalVideo, ProbeInfo, VideoRef
from devkit.samples import Scene, write_video
from stages.decode import FRAMES_DECODED, DecodeSampleStage
from stages.errors import DecodeError, LimitExceeded
from stages.fetch import probe_video
from tests.stages import media

LIMITS = LimitSettings()


def settings(**values: object) -> StageSettings:
    return StageSettings.model_validate(values)


def local(path: Path, limits: LimitSettings = LIMITS) -> LocalVideo:
    return LocalVideo(VideoRef(path.stem, path.as_uri()), str(path), probe_video(path, limits))


def run(stage: DecodeSampleStage, path: Path) -> list[Chunk]:
    return list(stage.stream(local(path)))


def drain(chunks: Iterator[Chunk]) -> tuple[list[Chunk], ReelsenseError | None]:
    """The chunks a stream delivered, and the error that ended it, if any."""
    received: list[Chunk] = []
    try:
        for chunk in chunks:
            received.append(chunk)
    except ReelsenseError as exc:
        return received, exc
    return received, None


def times(chunks: list[Chunk]) -> list[float]:
    return [round(frame.timestamp_s, 3) for chunk in chunks for frame in chunk.frames]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 s at 25 fps, 320x180, a key frame every 25 frames."""
    return media.write_clip(tmp_path_factory.mktemp("decode") / "clip.mp4", 4.0, gop=25)


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 s with grain: megabytes, far more than the demuxer reads ahead."""
    path = tmp_path_factory.mktemp("decode") / "long.mp4"
    return media.write_clip(path, 12.0, size=(640, 360), grain=8.0)


def test_fps_sampling_count_and_timestamps(clip: Path) -> None:
    chunks = run(DecodeSampleStage(settings(sample_fps=1.0), LIMITS), clip)
    assert times(chunks) == [0.0, 1.0, 2.0, 3.0]
    chunks = run(DecodeSampleStage(settings(sample_fps=5.0), LIMITS), clip)
    assert times(chunks) == [round(i * 0.2, 3) for i in range(20)]
    # At 2 fps the slots fall between frames (25 fps): the first frame after each slot.
    chunks_2 = run(DecodeSampleStage(settings(sample_fps=2.0), LIMITS), clip)
    assert times(chunks_2) == [0.0, 0.52, 1.0, 1.52, 2.0, 2.52, 3.0, 3.52]
    frames = [frame for chunk in chunks for frame in chunk.frames]
    assert [frame.index for frame in frames] == list(range(20))
    analysed = [frame for frame in frames if frame.repeat_of is None]
    assert all(frame.image is not None and frame.image.shape == (180, 320, 3) for frame in analysed)
    assert all(frame.image is None for frame in frames if frame.repeat_of is not None)


def test_fps_sampling_follows_pts_not_frame_count(tmp_path: Path) -> None:
    path = media.write_vfr_clip(
        tmp_path / "vfr.mp4", [0.0, 0.1, 0.5, 0.55, 1.7, 2.2, 2.9, 3.0, 4.5]
    )
    chunks = run(DecodeSampleStage(settings(sample_fps=1.0), LIMITS), path)
    # The first frame at or after each whole second; 1 s and 4 s have no frame of their own.
    assert times(chunks) == [0.0, 1.7, 2.2, 3.0, 4.5]


def test_sampled_frames_show_the_right_scene(tmp_path: Path) -> None:
    scenes = [Scene(("A",), 1.0, (250, 250, 250)), Scene(("B",), 1.0, (10, 10, 10))]
    path = write_video(tmp_path / "cut.mp4", scenes, fps=25, size=media.SMALL)
    chunks = run(DecodeSampleStage(settings(sample_fps=1.0), LIMITS), path)
    light, dark = (chunk_frame.image for chunk_frame in chunks[0].frames)
    assert light is not None
    assert dark is not None
    assert light.mean() > 200 > 60 > dark.mean()


def test_skipping_unreferenced_frames_keeps_every_slot(long_clip: Path) -> None:
    """B-frames left undecoded: about half the frames, the same slots, each sample at most a few
    frames after its slot and showing what the full decode's sample shows."""
    counted = []
    chunks = {}
    for nonref in (False, True):
        stage = DecodeSampleStage(settings(sample_fps=2.0, skip_nonref_frames=nonref), LIMITS)
        before = FRAMES_DECODED.count
        chunks[nonref] = run(stage, long_clip)
        counted.append(FRAMES_DECODED.count - before)
    assert counted[1] < 0.7 * counted[0]
    full, light = times(chunks[False]), times(chunks[True])
    assert len(light) == len(full) == 24
    assert all(0 <= b - a <= 4 / 25 + 1e-3 for a, b in zip(full, light, strict=True))
    assert light != full  # some slots' first frames were B-frames
    frames = [f for c in chunks[True] for f in c.frames]
    assert [f.index for f in frames] == list(range(24))
    whole = [f for c in chunks[False] for f in c.frames]
    for a, b in zip(whole, frames, strict=True):
        if a.image is not None and b.image is not None:  # the same scene, other grain
            assert np.abs(a.image.astype(int) - b.image.astype(int)).mean() < 12
    skip = DecodeSampleStage(settings(skip_nonref_frames=True), LIMITS).version_params()
    assert skip["skip_nonref_frames"] is True
    assert "skip_nonref_frames" not in DecodeSampleStage(settings(), LIMITS).version_params()
    key = settings(sample_mode="keyframes", skip_nonref_frames=True)
    assert "skip_nonref_frames" not in DecodeSampleStage(key, LIMITS).version_params()


def test_keyframes_mode_returns_exactly_the_key_frames(clip: Path) -> None:
    with av.open(str(clip)) as container:
        expected = [
            round(float(f.time), 3) for f in container.decode(video=0) if f.key_frame and f.time
        ]
    expected = [0.0, *expected]
    chunks = run(DecodeSampleStage(settings(sample_mode="keyframes"), LIMITS), clip)
    frames = [frame for chunk in chunks for frame in chunk.frames]
    assert times(chunks) == expected
    assert len(frames) >= 4  # one a second at least
    assert all(frame.keyframe for frame in frames)


def test_chunks_and_last_flag(clip: Path) -> None:
    chunks = run(DecodeSampleStage(settings(sample_fps=2.0, chunk_frames=3), LIMITS), clip)
    assert [len(c.frames) for c in chunks] == [3, 3, 2]
    assert [c.index for c in chunks] == [0, 1, 2]
    assert [c.last for c in chunks] == [False, False, True]
    assert {c.video_id for c in chunks} == {"clip"}
    # An exact multiple ends on a full last chunk, not on an extra empty one.
    chunks = run(DecodeSampleStage(settings(sample_fps=1.0, chunk_frames=2), LIMITS), clip)
    assert [(len(c.frames), c.last) for c in chunks] == [(2, False), (2, True)]


def test_chunk_size_follows_the_decoding_cost() -> None:
    def probe(width: int, height: int, fps: float) -> ProbeInfo:
        return ProbeInfo("mp4", "h264", width, height, fps, 60.0, 1, 0, 1)

    stage = DecodeSampleStage(settings(sample_fps=1.0), LIMITS)  # 240 Mpix, at most 8
    assert stage.chunk_size(probe(1280, 720, 30.0)) == 8  # 27.6 Mpix decoded per sample
    assert stage.chunk_size(probe(1920, 1080, 30.0)) == 3  # 62.2
    assert stage.chunk_size(probe(1280, 720, 60.0)) == 4  # 55.3
    assert stage.chunk_size(probe(3840, 2160, 60.0)) == 1  # 498: never less than one
    assert stage.chunk_size(probe(320, 180, 25.0)) == 8  # cheap: capped at chunk_frames
    # A probe without a frame rate or size keeps the plain count.
    assert stage.chunk_size(probe(3840, 2160, 0.0)) == 8
    assert stage.chunk_size(probe(0, 0, 30.0)) == 8
    keyframes = DecodeSampleStage(settings(sample_mode="keyframes"), LIMITS)
    assert keyframes.chunk_size(probe(3840, 2160, 60.0)) == 8  # only the samples are decoded
    plain = DecodeSampleStage(settings(chunk_decode_mpix=None, chunk_frames=5), LIMITS)
    assert plain.chunk_size(probe(3840, 2160, 60.0)) == 5


def test_process_batch_runs_several_videos(clip: Path) -> None:
    stage = DecodeSampleStage(settings(chunk_frames=2), LIMITS)
    chunks = stage.process_batch([local(clip), local(clip)])
    assert [c.index for c in chunks] == [0, 1, 0, 1]


def test_downscale_keeps_aspect_and_never_upscales(tmp_path: Path) -> None:
    wide = media.write_clip(tmp_path / "wide.mp4", 1.0, size=(1280, 720))
    tall = media.write_clip(tmp_path / "tall.mp4", 1.0, size=(360, 640))
    for path, max_side, shape in [
        (wide, 640, (360, 640, 3)),
        (tall, 320, (320, 180, 3)),
        (tall, 1280, (640, 360, 3)),
    ]:
        chunks = run(DecodeSampleStage(settings(max_side=max_side), LIMITS), path)
        image = chunks[0].frames[0].image
        assert image is not None
        assert image.shape == shape
        assert image.dtype == np.uint8


def test_rotated_phone_video_is_turned_upright(tmp_path: Path) -> None:
    path = media.write_clip(tmp_path / "phone.mp4", 1.0, size=(320, 180))
    upright = run(DecodeSampleStage(settings(), LIMITS), path)[0].frames[0].image
    media.set_mp4_rotation(path, -90)
    turned = run(DecodeSampleStage(settings(), LIMITS), path)[0].frames[0].image
    assert upright is not None
    assert turned is not None
    assert turned.shape == (320, 180, 3)
    # Displayed clockwise by 90 degrees: the stored top row becomes the right column.
    assert np.array_equal(turned, np.rot90(upright, k=-1))


def test_streaming_yields_before_the_end_is_read(long_clip: Path, tmp_path: Path) -> None:
    path = tmp_path / "growing.mp4"
    path.write_bytes(long_clip.read_bytes())
    chunks = DecodeSampleStage(settings(chunk_frames=2), LIMITS).stream(local(path))
    first = next(chunks)
    assert first.index == 0
    assert not first.last
    # Cut the file under the running decoder: it has not read that far yet, so it notices
    # (the packet cut in half may fail to decode before the early end is seen).
    os.truncate(path, path.stat().st_size // 2)
    with pytest.raises(DecodeError) as caught:
        list(chunks)
    assert caught.value.code in ("video_truncated", "decode_error")


def test_truncated_file_yields_chunks_then_fails(long_clip: Path, tmp_path: Path) -> None:
    # Matroska keeps its header at the front, so a cut file still opens and probes.
    path = media.write_clip(tmp_path / "cut.mkv", 8.0)
    media.truncate(path, 0.5)
    stage = DecodeSampleStage(settings(chunk_frames=1), LIMITS)
    received, error = drain(stage.stream(local(path)))
    assert isinstance(error, DecodeError)
    assert error.code in ("video_truncated", "decode_error")
    assert len(received) >= 2
    assert not any(chunk.last for chunk in received)


def test_corrupt_data_mid_decode(long_clip: Path, tmp_path: Path) -> None:
    path = tmp_path / "corrupt.mp4"
    path.write_bytes(long_clip.read_bytes())
    media.corrupt_middle(path)
    stage = DecodeSampleStage(settings(chunk_frames=1), LIMITS)
    received, error = drain(stage.stream(local(path)))
    assert isinstance(error, DecodeError)
    assert error.code == "decode_error"
    assert received  # chunks before the damage were delivered
    assert not any(chunk.last for chunk in received)


def test_frame_cap(clip: Path) -> None:
    # Known duration: refused before anything is decoded.
    stage = DecodeSampleStage(settings(sample_fps=2.0), LimitSettings(max_frames=3))
    chunks = stage.stream(local(clip))
    with pytest.raises(LimitExceeded) as caught:
        next(chunks)
    assert caught.value.code == "limit_frames"
    # Key frames cannot be counted ahead: the cap stops the decoder when it is reached.
    stage = DecodeSampleStage(
        settings(sample_mode="keyframes", chunk_frames=1), LimitSettings(max_frames=2)
    )
    received, error = drain(stage.stream(local(clip)))
    assert isinstance(error, LimitExceeded)
    assert error.code == "limit_frames"
    assert len(received) == 1


def test_limits_hold_on_what_is_decoded(tmp_path: Path) -> None:
    """Headers that understate a video pass the probe; decoding still stops at each limit,
    with its own reason code, after the chunks that were within it."""
    stage_settings = settings(sample_fps=1.0, chunk_frames=1)
    live = media.write_plain(
        tmp_path / "live.mkv", 4.0, container="matroska", options={"live": "1"}
    )
    small, large = (
        media.write_plain(tmp_path / f"{name}.ts", 2.0, size=size, container="mpegts")
        for name, size in (("small", (64, 64)), ("large", (640, 480)))
    )
    grows = media.concatenate(tmp_path / "grows.ts", small, large)
    long = media.write_plain(tmp_path / "long.ts", 120.0, container="mpegts")
    stalls = media.concatenate(tmp_path / "stalls.ts", long, long)
    cases = [
        # No Duration element: probed as 0 s, decoded for 4 s.
        (live, LimitSettings(max_duration_s=2.0), "limit_duration"),
        # The first frames are 64x64, the later ones 640x480.
        (grows, LimitSettings(max_width=320, max_height=240), "limit_dimensions"),
        (live, LimitSettings(max_decoded_frames=15), "limit_decoded_frames"),
        (live, LimitSettings(max_decode_s=1e-6), "limit_decode_time"),
        # No grace, and a millionth of a second per second of video: decoding outlasts it.
        (live, LimitSettings(decode_grace_s=0, decode_s_per_video_s=1e-6), "limit_decode_time"),
        # The clock starts again at 0 after 120 s: 1200 frames that never pass it.
        (stalls, LIMITS, "timestamps_stalled"),
    ]
    for path, limits, code in cases:
        video = local(path, limits)
        if path == live:
            assert video.probe.duration_s == 0
        if path == grows:
            assert (video.probe.width, video.probe.height) == (64, 64)
        received, error = drain(DecodeSampleStage(stage_settings, limits).stream(video))
        assert isinstance(error, ReelsenseError), (path.name, code)
        assert error.code == code, (path.name, error)
        assert not any(chunk.last for chunk in received)
    # Within the limits, each decodes to the end.
    for path in (live, grows):
        chunks = run(DecodeSampleStage(stage_settings, LIMITS), path)
        assert chunks[-1].last


def test_decoding_time_grows_with_the_video_and_waits_do_not_count(tmp_path: Path) -> None:
    """The time budget is the grace plus so much per second of video decoded: a video whose
    chunks are taken slowly downstream (far past the grace, in wall-clock time) still decodes
    to its end, as only the decoder's own time counts (``test_limits_hold_on_what_is_decoded``
    has the budget that stops it)."""
    path = media.write_plain(tmp_path / "paced.ts", 4.0, container="mpegts")
    stage_settings = settings(sample_fps=1.0, chunk_frames=1)
    paced = LimitSettings(decode_grace_s=2.0, decode_s_per_video_s=0.0)
    chunks = []
    for chunk in DecodeSampleStage(stage_settings, paced).stream(local(path, paced)):
        chunks.append(chunk)
        time.sleep(0.8)  # the stages downstream take their time: 3+ s over 4 chunks
    assert chunks[-1].last
    assert len(chunks) >= 4


def test_abandoned_stream_can_be_closed(long_clip: Path) -> None:
    chunks = DecodeSampleStage(settings(chunk_frames=1), LIMITS).stream(local(long_clip))
    assert next(chunks).index == 0
    assert isinstance(chunks, Generator)
    chunks.close()  # closes the container; must not raise
    with pytest.raises(StopIteration):
        next(chunks)


def test_version_params() -> None:
    fps = DecodeSampleStage(settings(sample_fps=2.0, chunk_frames=4, max_side=640), LIMITS)
    key = DecodeSampleStage(settings(sample_mode="keyframes", sample_fps=2.0), LIMITS)
    assert fps.version_params() == {
        "sample_mode": "fps",
        "sample_fps": 2.0,
        "chunk_frames": 4,
        "max_side": 640,
        "sampler_revision": 2,
        "chunk_decode_mpix": 240.0,
        "shots": {
            "cut_change": 20.0,
            "cut_ratio": 3.0,
            "gradual_change": 12.0,
            "max_transition_s": 4.0,
            "min_shot_s": 0.4,
            "lag_s": 0.2,
        },
        "repeat_max_change": 8.0,
        "thumbnail_side": 320,
    }
    assert "sample_fps" not in key.version_params()
    budget = DecodeSampleStage(
        settings(sample_fps=2.0, chunk_frames=4, max_side=640, chunk_decode_mpix=100), LIMITS
    )
    assert budget.version_params() != fps.version_params()
    other = DecodeSampleStage(settings(sample_fps=1.0, chunk_frames=4, max_side=640), LIMITS)
    assert other.version_params() != fps.version_params()
    assert fps.name == "decode"
