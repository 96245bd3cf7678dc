"""VlmStage through the real transformers path on a tiny random Qwen2-VL."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.config import StageSettings
from core.records import Chunk, Frame
from devkit.samples import render_frame
from models.errors import ModelUnavailable
from models.vlm import TransformersVlmEngine
from stages.vlm import VlmStage
from tests.models.tiny_vlm import build_tiny_qwen2_vl


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen2-vl"))


def settings(model: Path, **extra: object) -> StageSettings:
    return StageSettings(vlm_model=str(model), vlm_max_new_tokens=6, **extra)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stage(tiny_vlm_dir: Path) -> Iterator[VlmStage]:
    vlm = VlmStage(settings(tiny_vlm_dir, vlm_batch_size=1))
    vlm.setup()
    yield vlm
    vlm.teardown()


def images() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [
        np.zeros((720, 1280, 3), dtype=np.uint8),
        rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8),
        np.full((720, 1280, 3), 255, dtype=np.uint8),
        render_frame(["HELLO"]),
    ]


def test_captions_land_on_their_frames(stage: VlmStage, tiny_vlm_dir: Path) -> None:
    black, noise, white, text = images()
    first = Chunk(
        "video-a",
        0,
        [Frame(0, 0.0, black), Frame(1, 1.0, None), Frame(2, 2.0, noise)],
    )
    second = Chunk("video-b", 2, [Frame(0, 8.0, white), Frame(1, 9.0, text)])
    out = stage.process_batch([first, second])

    assert [(c.video_id, c.index) for c in out] == [("video-a", 0), ("video-b", 2)]
    captions = [f.caption for c in out for f in c.frames]
    assert captions[1] == ""  # no pixels, no caption
    assert all(isinstance(caption, str) for caption in captions)

    reference = TransformersVlmEngine(str(tiny_vlm_dir), batch_size=1)
    reference.load()
    prompt = StageSettings().vlm_prompt
    expected = [reference.caption([image], prompt, 6)[0] for image in (black, noise, white, text)]
    assert [captions[0], captions[2], captions[3], captions[4]] == expected
    assert len(set(expected)) > 1  # the frames do get different answers


def test_same_frames_same_captions(stage: VlmStage) -> None:
    def run() -> list[str]:
        chunk = Chunk("video-c", 0, [Frame(i, float(i), image) for i, image in enumerate(images())])
        return [f.caption for f in stage.process_batch([chunk])[0].frames]

    assert run() == run()


def test_cross_video_batches_in_one_generate_call(tiny_vlm_dir: Path) -> None:
    vlm = VlmStage(settings(tiny_vlm_dir, vlm_batch_size=8))
    vlm.setup()
    chunks = [
        Chunk(f"video-{n}", 0, [Frame(0, 0.0, image)]) for n, image in enumerate(images()[:3])
    ]
    out = vlm.process_batch(chunks)
    vlm.teardown()
    assert [len(c.frames) for c in out] == [1, 1, 1]
    assert all(c.frames[0].caption for c in out)


def test_needs_a_model() -> None:
    with pytest.raises(ValueError, match="vlm_model"):
        VlmStage(StageSettings())


def test_version_params_cover_prompt_model_and_engine(tiny_vlm_dir: Path) -> None:
    base = VlmStage(settings(tiny_vlm_dir)).version_params()
    assert base["model"] == str(tiny_vlm_dir)
    assert VlmStage(settings(tiny_vlm_dir, vlm_prompt="Tags?")).version_params() != base
    assert VlmStage(settings(tiny_vlm_dir, vlm_engine="vllm")).version_params() != base
    assert VlmStage(settings(tiny_vlm_dir, vlm_max_pixels=200_704)).version_params() != base
    assert VlmStage(settings(tiny_vlm_dir, vlm_batch_size=3)).version_params() == base


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_stage_needs_vllm_on_its_node(tiny_vlm_dir: Path) -> None:
    vlm = VlmStage(settings(tiny_vlm_dir, vlm_engine="vllm"))
    with pytest.raises(ModelUnavailable, match="vllm"):
        vlm.setup()
