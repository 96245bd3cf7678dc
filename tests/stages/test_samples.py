"""The sample video generator: frames, encoding, scene cuts, determinism, fonts."""

from __future__ import annotations

import hashlib
from pathlib import Path

import av
import numpy as np
import pytest

from devkit import fonts
from devkit.fonts import FontNotFound, find_cjk_font
from devkit.samples import (
    Scene,
    render_frame,
    write_demo_videos,
    write_long_video,
    write_video,
)

SMALL = (320, 180)


def _ink(image: np.ndarray) -> int:
    """Dark pixels on a light background."""
    return int((image.mean(axis=2) < 100).sum())


def test_render_frame_shape_and_text() -> None:
    blank = render_frame([], size=SMALL)
    latin = render_frame(["INVOICE 2048"], size=SMALL)
    chinese = render_frame(["欢迎光临"], size=SMALL)
    assert latin.shape == (180, 320, 3)
    assert latin.dtype == np.uint8
    assert _ink(blank) == 0
    assert _ink(latin) > 200
    assert _ink(chinese) > 200
    # Distinct glyphs, not the same "missing glyph" boxes for every character.
    welcome, data = render_frame(["欢迎"], size=SMALL), render_frame(["数据"], size=SMALL)
    assert not np.array_equal(welcome, data)


def test_dark_background_gets_light_text() -> None:
    image = render_frame(["HELLO"], size=SMALL, background=(10, 10, 10))
    assert int((image.mean(axis=2) > 200).sum()) > 100


def test_grain_is_seeded() -> None:
    a = render_frame(["X"], size=SMALL, seed=1, grain=8.0)
    b = render_frame(["X"], size=SMALL, seed=1, grain=8.0)
    c = render_frame(["X"], size=SMALL, seed=2, grain=8.0)
    clean = render_frame(["X"], size=SMALL)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert 4.0 < float(np.abs(a.astype(int) - clean.astype(int)).mean()) < 10.0


def test_long_lines_are_shrunk_to_fit() -> None:
    image = render_frame(["A VERY LONG LINE OF TEXT THAT WOULD NOT FIT"], size=SMALL)
    columns = np.flatnonzero((image.mean(axis=2) < 100).any(axis=0))
    assert columns.min() > 0
    assert columns.max() < SMALL[0] - 1


def test_write_video_encodes_h264_with_hard_cuts(tmp_path: Path) -> None:
    scenes = [
        Scene(("ONE",), 1.0, (250, 250, 250)),
        Scene(("TWO",), 1.0, (10, 10, 10)),
    ]
    path = write_video(tmp_path / "cut.mp4", scenes, fps=10, size=SMALL)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        assert stream.codec_context.pix_fmt == "yuv420p"
        assert (stream.codec_context.width, stream.codec_context.height) == SMALL
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
    assert len(frames) == 20
    brightness = [float(f.mean()) for f in frames]
    assert min(brightness[:10]) > 200  # light background scene
    assert max(brightness[10:]) < 60  # hard cut to the dark one


def test_write_video_is_deterministic(tmp_path: Path) -> None:
    scenes = [Scene(("SAME",), 0.5)]
    a = write_video(tmp_path / "a.mp4", scenes, size=SMALL, grain=6.0, seed=5)
    b = write_video(tmp_path / "b.mp4", scenes, size=SMALL, grain=6.0, seed=5)
    c = write_video(tmp_path / "c.mp4", scenes, size=SMALL, grain=6.0, seed=6)
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b, c)]
    assert digest[0] == digest[1]
    assert digest[0] != digest[2]


def test_write_video_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="scene"):
        write_video(tmp_path / "none.mp4", [])
    with pytest.raises(ValueError, match="video codec"):
        write_video(tmp_path / "audio.mp4", [Scene(("A",), 0.2)], codec="aac")


def test_demo_videos(tmp_path: Path) -> None:
    videos = write_demo_videos(tmp_path, count=2)
    assert [v.path.name for v in videos] == ["invoice.mp4", "datacenter.mp4"]
    assert videos[0].expected_texts == ("INVOICE 2048", "Hello Reelsense", "欢迎光临")
    assert "数据中心" in videos[1].expected_texts
    for video in videos:
        assert 4.0 <= video.duration_s <= 8.0
        assert video.cut_times_s
        with av.open(str(video.path)) as container:
            stream = container.streams.video[0]
            assert (stream.codec_context.width, stream.codec_context.height) == (1280, 720)
            assert container.duration is not None
            assert container.duration / 1e6 == pytest.approx(video.duration_s, abs=0.1)
    with pytest.raises(ValueError, match="count"):
        write_demo_videos(tmp_path, count=0)


def test_long_video_cycles_scenes(tmp_path: Path) -> None:
    video = write_long_video(tmp_path / "long.mp4", 2.5, size=SMALL, scene_seconds=1.0, grain=3)
    assert [s.seconds for s in video.scenes] == [1.0, 1.0, 0.5]
    assert len(set(video.expected_texts)) == 3
    with av.open(str(video.path)) as container:
        assert container.streams.video[0].frames == round(2.5 * 25)


def test_missing_cjk_font_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fonts").mkdir()
    monkeypatch.setattr(fonts, "_DEFAULT_FONT", str(tmp_path / "missing.ttc"))
    monkeypatch.setattr(fonts, "_FONT_DIRS", (tmp_path / "fonts",))
    monkeypatch.delenv(fonts.FONT_ENV, raising=False)
    find_cjk_font.cache_clear()
    try:
        with pytest.raises(FontNotFound, match="fonts-wqy-microhei"):
            find_cjk_font()
    finally:
        find_cjk_font.cache_clear()


def test_font_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fonts.FONT_ENV, fonts._DEFAULT_FONT)
    find_cjk_font.cache_clear()
    try:
        assert find_cjk_font() == Path(fonts._DEFAULT_FONT)
    finally:
        find_cjk_font.cache_clear()
