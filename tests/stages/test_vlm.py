"""VlmStage through the real transformers path on a tiny random Qwen2-VL: free-text captions
of every sample, and structured descriptions of each shot's first sample, whose JSON is valid
because decoding is constrained (the random model alone writes no JSON)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.config import StageSettings, VlmSettings
from core.description import DESCRIPTION_PROMPT, ShotDescription
from core.records import Chunk, Frame, ShotBoundary
from devkit.samples import render_frame
from devkit.tiny_vlm import build_tiny_qwen2_vl
from models.errors import ModelUnavailable
from models.vlm import TransformersVlmEngine
from stages.vlm import VlmStage


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen2-vl"))


def settings(model: Path, **vlm: object) -> StageSettings:
    """Captions of every sample, unless ``vlm`` (fields of ``stages.vlm``) says otherwise."""
    chosen: dict[str, object] = {"output": "caption", "scope": "samples", **vlm}
    return StageSettings(vlm=VlmSettings(model=str(model), max_new_tokens=6, **chosen))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stage(tiny_vlm_dir: Path) -> Iterator[VlmStage]:
    vlm = VlmStage(settings(tiny_vlm_dir, batch_size=1))
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
    prompt = StageSettings().vlm.prompt
    expected = [reference.caption([image], prompt, 6)[0] for image in (black, noise, white, text)]
    assert [captions[0], captions[2], captions[3], captions[4]] == expected
    assert len(set(expected)) > 1  # the frames do get different answers


def test_same_frames_same_captions(stage: VlmStage) -> None:
    def run() -> list[str]:
        chunk = Chunk("video-c", 0, [Frame(i, float(i), image) for i, image in enumerate(images())])
        return [f.caption for f in stage.process_batch([chunk])[0].frames]

    assert run() == run()


def test_cross_video_batches_in_one_generate_call(tiny_vlm_dir: Path) -> None:
    vlm = VlmStage(settings(tiny_vlm_dir, batch_size=8))
    vlm.setup()
    chunks = [
        Chunk(f"video-{n}", 0, [Frame(0, 0.0, image)]) for n, image in enumerate(images()[:3])
    ]
    out = vlm.process_batch(chunks)
    vlm.teardown()
    assert [len(c.frames) for c in out] == [1, 1, 1]
    assert all(c.frames[0].caption for c in out)


def test_needs_a_model() -> None:
    with pytest.raises(ValueError, match=r"vlm\.model"):
        VlmStage(StageSettings())


def test_version_params_cover_prompt_model_and_engine(tiny_vlm_dir: Path) -> None:
    base = VlmStage(settings(tiny_vlm_dir)).version_params()
    assert base["model"] == str(tiny_vlm_dir)
    assert VlmStage(settings(tiny_vlm_dir, prompt="Tags?")).version_params() != base
    assert VlmStage(settings(tiny_vlm_dir, engine="vllm")).version_params() != base
    assert VlmStage(settings(tiny_vlm_dir, max_pixels=200_704)).version_params() != base
    assert VlmStage(settings(tiny_vlm_dir, batch_size=3)).version_params() == base


def test_each_shot_is_described_in_the_schema(tiny_vlm_dir: Path) -> None:
    vlm = VlmStage(settings(tiny_vlm_dir, output="description", scope="shots"))
    vlm.setup()
    try:
        cut = ShotBoundary(2.0, "cut", 40.0, 2.0, 2.0)
        black, noise, white, text = images()
        chunk = Chunk(
            "video-d",
            0,
            [
                Frame(0, 0.0, black),  # the video's first shot
                Frame(1, 1.0, noise),
                Frame(2, 2.0, white, boundaries=(cut,)),  # the next shot
                Frame(3, 3.0, text),
            ],
        )
        (out,) = vlm.process_batch([chunk])
        # The random model alone does not write JSON: the constraint does.
        free = vlm._engine.caption([black], DESCRIPTION_PROMPT, 64)  # type: ignore[union-attr]
    finally:
        vlm.teardown()
    described = [frame.index for frame in out.frames if frame.description is not None]
    assert described == [0, 2]
    for index in described:
        frame = out.frames[index]
        description = ShotDescription.model_validate(frame.description)
        assert frame.caption == description.caption
        assert len(description.tags) <= 6
    assert [out.frames[i].caption for i in (1, 3)] == ["", ""]
    with pytest.raises(json.JSONDecodeError):
        json.loads(free[0])


async def test_process_async_answers_as_process_batch(stage: VlmStage) -> None:
    # The async path a continuously batching engine takes (vLLM's, in its pool): here the
    # transformers engine in a worker thread; the same frames get the same answers.
    def chunk() -> Chunk:
        return Chunk("video-f", 0, [Frame(i, float(i), image) for i, image in enumerate(images())])

    (batched,) = stage.process_batch([chunk()])
    alone = await stage.process_async(chunk())
    assert [f.caption for f in alone.frames] == [f.caption for f in batched.frames]
    assert all(f.caption for f in alone.frames)


def test_an_answer_cut_short_is_no_description(tiny_vlm_dir: Path) -> None:
    vlm = VlmStage(settings(tiny_vlm_dir, output="description", description_max_tokens=64))
    vlm.setup()
    try:
        (out,) = vlm.process_batch([Chunk("video-e", 0, [Frame(0, 0.0, images()[1])])])
    finally:
        vlm.teardown()
    # 64 tokens do not finish the random model's answer: nothing half-parsed is kept.
    assert out.frames[0].description is None
    assert out.frames[0].caption == ""


def test_description_version_covers_schema_prompt_and_scope(tiny_vlm_dir: Path) -> None:
    described = settings(tiny_vlm_dir, output="description", scope="shots")
    base = VlmStage(described).version_params()
    assert base["schema"] is not None
    assert base != VlmStage(settings(tiny_vlm_dir)).version_params()
    other_prompt = described.model_copy(
        update={"vlm": described.vlm.model_copy(update={"description_prompt": "JSON please."})}
    )
    assert VlmStage(other_prompt).version_params() != base
    every_sample = described.model_copy(
        update={"vlm": described.vlm.model_copy(update={"scope": "samples"})}
    )
    assert VlmStage(every_sample).version_params() != base
    # Without shot boundaries there are no shots to go by: every sample is described.
    no_shots = described.model_copy(update={"shot_detection": False})
    assert VlmStage(no_shots).version_params()["scope"] == "samples"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_stage_needs_vllm_on_its_node(tiny_vlm_dir: Path) -> None:
    vlm = VlmStage(settings(tiny_vlm_dir, engine="vllm"))
    with pytest.raises(ModelUnavailable, match="vllm"):
        vlm.setup()
