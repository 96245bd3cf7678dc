"""QrStage: the codes of every sample with pixels, chunks of several videos in one batch; on
with review labels and their QR flag; its version the library's, reaching what reads pixels.
And a video through the sequential pipeline, a code shown in its middle seconds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zxingcpp
from PIL import Image as PILImage

from core.config import ReviewSettings, ServiceConfig
from core.records import Chunk, Frame, VideoRef
from core.review_settings import Thresholds
from runtime.executor import merge_outputs
from stages.base import Fusion, Resources
from stages.pipeline import Pipeline
from stages.qr import QrStage
from stages.runner import SequentialRunner

LINK = "https://t.me/joinchat/offplatform"
CONTACT = "微信: shop_8888"


def with_code(text: str, side: int = 200, at: tuple[int, int] = (300, 200)) -> np.ndarray:
    """A grey 1280 x 720 frame with a code of ``text``, ``side`` px, its corner ``at``."""
    barcode = zxingcpp.create_barcode(text, zxingcpp.BarcodeFormat.QRCode)
    pasted = PILImage.fromarray(np.asarray(barcode.to_image(scale=8))).convert("RGB")
    image = PILImage.new("RGB", (1280, 720), (110, 120, 130))
    image.paste(pasted.resize((side, side), PILImage.Resampling.BILINEAR), at)
    return np.array(image)


def blank() -> np.ndarray:
    return np.full((720, 1280, 3), 110, dtype=np.uint8)


@pytest.fixture(scope="module")
def stage() -> Iterator[QrStage]:
    qr = QrStage(ReviewSettings())
    qr.setup()
    yield qr
    qr.teardown()


def config(**review: object) -> ServiceConfig:
    return ServiceConfig.load(asr={"enabled": False}, stages={"review": review})


def test_every_sample_with_pixels_gets_its_codes_and_repeats_take_their_originals(
    stage: QrStage,
) -> None:
    first = Chunk(
        "video-a",
        0,
        [
            Frame(0, 0.0, with_code(LINK)),
            Frame(1, 1.0, None, repeat_of=0),  # looks like sample 0: not analysed
            Frame(2, 2.0, blank()),
        ],
    )
    both = with_code(CONTACT, 160, (900, 450))
    both[100:300, 100:300] = with_code(LINK)[200:400, 300:500]
    second = Chunk("video-b", 4, [Frame(0, 8.0, both)])

    done = stage.process_batch([first, second])  # two videos in one call

    assert [(c.video_id, c.index) for c in done] == [("video-a", 0), ("video-b", 4)]
    (link,) = done[0].frames[0].extras["qr"]
    assert (link["text"], link["format"]) == (LINK, "QRCode")
    assert len(link["box"]) == 4
    assert all(isinstance(xy, list) and len(xy) == 2 for xy in link["box"])
    assert all(300 <= x <= 500 and 200 <= y <= 400 for x, y in link["box"])
    assert "qr" not in done[0].frames[1].extras  # no pixels: nothing looked at
    assert done[0].frames[2].extras["qr"] == []
    assert [c["text"] for c in done[1].frames[0].extras["qr"]] == [LINK, CONTACT]
    filled = merge_outputs([done[0]], stage.fills).with_repeats_filled(stage.fills)
    assert filled.frames[1].output("qr") == [link]


def test_empty_batch(stage: QrStage) -> None:
    assert stage.process_batch([]) == []


def test_declared_as_a_cheap_cpu_stage_fused_per_core() -> None:
    assert (QrStage.name, QrStage.reads, QrStage.fills) == ("qr", ("image",), ("qr",))
    assert QrStage.fusion is Fusion.PER_CORE
    assert QrStage.resources == Resources(cpus=0.05)


def test_on_with_review_labels_and_their_qr_flag() -> None:
    assert QrStage.build(config()) is not None
    assert QrStage.build(config(qr=False)) is None
    assert QrStage.build(config(enabled=False)) is None
    assert QrStage.build(config(enabled=False, qr=True)) is None


def test_its_version_is_the_librarys_and_pixels_reach_it() -> None:
    params = QrStage(ReviewSettings()).version_params()
    assert params == {"model": "zxing-cpp-3.1.1:QRCode,MicroQRCode,RMQRCode"}
    # Thresholds decide what review makes of a code, not which codes are found.
    stricter = ReviewSettings(thresholds={"qr": Thresholds(review=0.2, block=0.6)})
    assert QrStage(stricter).version_params() == params
    base = Pipeline.from_config(config()).lineage
    assert base.fills["qr"] == ("qr",)
    assert "qr" in base.analysed_fields
    sampled = Pipeline.from_config(
        ServiceConfig.load(asr={"enabled": False}, stages={"sample_fps": 3.0})
    ).lineage
    assert sampled.versions["qr"] != base.versions["qr"]


def test_a_pipeline_without_it_has_no_qr_output() -> None:
    pipeline = Pipeline.from_config(config(qr=False))
    assert "qr" not in [stage.name for stage in pipeline.image_stages]
    assert "qr" not in pipeline.lineage.versions


def _video(path: Path, seconds: int = 6, fps: int = 4) -> Path:
    """A 640 x 360 video with a code of ``LINK`` on screen from second 2 to second 4."""
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv420p"
        stream.options = {"preset": "veryfast", "threads": "1"}
        coded = np.array(PILImage.fromarray(with_code(LINK, 360, (460, 180))).resize((640, 360)))
        plain = np.array(PILImage.fromarray(blank()).resize((640, 360)))
        for n in range(seconds * fps):
            image = coded if 2 * fps <= n < 4 * fps else plain
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def test_a_video_through_the_pipeline_has_the_code_where_it_is_shown(tmp_path: Path) -> None:
    path = _video(tmp_path / "code.mp4")
    pipeline = Pipeline.from_config(
        ServiceConfig.load(
            asr={"enabled": False},
            limits={"file_roots": [str(tmp_path)]},
            stages={"labels": {"enabled": False}, "review": {"enabled": True}},
        )
    )
    assert "qr" in [stage.name for stage in pipeline.image_stages]
    runner = SequentialRunner(pipeline)
    runner.setup()
    try:
        result = runner.run_one(VideoRef(video_id="qr", uri=path.as_uri()))
    finally:
        runner.teardown()
    seen = {
        round(f.timestamp_s, 1): [c["text"] for c in f.output("qr") or []] for f in result.frames
    }
    shown = [texts for t, texts in seen.items() if 2.2 <= t < 3.8]
    assert shown, seen
    assert all(texts == [LINK] for texts in shown), seen
    assert all(texts == [] for t, texts in seen.items() if t < 1.8 or t >= 4.2), seen
