"""TransformersVlmEngine on a tiny random Qwen2-VL built at test time; vLLM's absence."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.config import StageSettings, VlmSettings
from core.errors import PermanentError
from devkit.samples import render_frame
from devkit.tiny_vlm import SPECIAL_TOKENS, build_tiny_qwen2_vl, byte_level_tokenizer
from models.errors import InvalidImage, ModelLoadError, ModelUnavailable
from models.vlm import (
    IMAGE_PAD,
    TransformersVlmEngine,
    VllmVlmEngine,
    engine_for,
    qwen2_vl_prompt,
)

PROMPT = "Describe this video frame in one sentence."


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen2-vl"))


@pytest.fixture(scope="module")
def engine(tiny_vlm_dir: Path) -> Iterator[TransformersVlmEngine]:
    vlm = TransformersVlmEngine(str(tiny_vlm_dir), batch_size=2)
    vlm.load()
    yield vlm
    vlm.close()


def frames() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        np.zeros((720, 1280, 3), dtype=np.uint8),
        np.full((720, 1280, 3), 255, dtype=np.uint8),
        rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8),
        render_frame(["INVOICE 2048"], size=(640, 360)),  # another size in the same batch
        rng.integers(0, 256, (300, 200, 3), dtype=np.uint8),
    ]


def test_one_caption_per_frame_from_greedy_generation(engine: TransformersVlmEngine) -> None:
    captions = engine.caption(frames(), PROMPT, max_new_tokens=6)
    assert len(captions) == 5
    assert all(isinstance(caption, str) for caption in captions)
    assert any(captions)
    longest = max(len(token) for token in byte_level_tokenizer().get_vocab())
    for caption in captions:
        # Six tokens of the tiny vocabulary at most, none of them special.
        assert len(caption) <= 6 * longest
        assert not any(special in caption for special in SPECIAL_TOKENS)


def test_max_new_tokens_bounds_generation(engine: TransformersVlmEngine) -> None:
    images = frames()[:3]
    short = engine.caption(images, PROMPT, max_new_tokens=1)
    longer = engine.caption(images, PROMPT, max_new_tokens=8)
    assert all(len(caption.split()) <= 1 for caption in short)
    assert sum(len(c.split()) for c in longer) > sum(len(c.split()) for c in short)
    # Greedy: the longer answers continue the shorter ones.
    for first, full in zip(short, longer, strict=True):
        assert full.startswith(first)


def test_greedy_decoding_is_deterministic(engine: TransformersVlmEngine) -> None:
    assert engine.caption(frames(), PROMPT, 6) == engine.caption(frames(), PROMPT, 6)


def test_the_image_reaches_the_model(engine: TransformersVlmEngine) -> None:
    black, white, noise = frames()[:3]
    captions = engine.caption([black, white, noise], PROMPT, 8)
    assert len(set(captions)) > 1


def test_batching_does_not_change_answers(tiny_vlm_dir: Path) -> None:
    one_by_one = TransformersVlmEngine(str(tiny_vlm_dir), batch_size=1)
    one_by_one.load()
    images = frames()[:3]  # same size: no padding, so rows see identical inputs
    batched = TransformersVlmEngine(str(tiny_vlm_dir), batch_size=8)
    batched.load()
    assert batched.caption(images, PROMPT, 6) == one_by_one.caption(images, PROMPT, 6)


def test_no_images_no_captions(engine: TransformersVlmEngine) -> None:
    assert engine.caption([], PROMPT, 4) == []


def test_read_only_frames(engine: TransformersVlmEngine) -> None:
    image = frames()[2]
    expected = engine.caption([image], PROMPT, 4)
    image.setflags(write=False)
    assert engine.caption([image], PROMPT, 4) == expected


def test_bad_image_fails_permanently(engine: TransformersVlmEngine) -> None:
    with pytest.raises(InvalidImage):
        engine.caption([np.zeros((10, 10), dtype=np.uint8)], PROMPT, 4)


def test_max_pixels_bounds_the_image_tokens(tiny_vlm_dir: Path) -> None:
    small = TransformersVlmEngine(str(tiny_vlm_dir), max_pixels=28 * 28 * 4)
    small.load()
    assert small.caption(frames()[:1], PROMPT, 2)


def test_missing_model_folder_fails_permanently(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError) as caught:
        TransformersVlmEngine(str(tmp_path / "absent")).load()
    assert isinstance(caught.value, PermanentError)


def test_a_text_only_model_is_refused(tmp_path: Path, tiny_vlm_dir: Path) -> None:
    # The tokenizer and image processor are fine, the config is not a vision-language model.
    for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"):
        (tmp_path / name).write_bytes((tiny_vlm_dir / name).read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1}))
    with pytest.raises(ModelLoadError):
        TransformersVlmEngine(str(tmp_path)).load()


def test_prompt_follows_the_qwen2_vl_chat_format() -> None:
    prompt = qwen2_vl_prompt("What is shown?", image_tokens=3)
    assert prompt.count(IMAGE_PAD) == 3
    assert f"<|vision_start|>{IMAGE_PAD * 3}<|vision_end|>What is shown?<|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_engine_for_picks_the_configured_engine() -> None:
    transformers_engine = engine_for(
        StageSettings(vlm=VlmSettings(model="/models/qwen2-vl", batch_size=3))
    )
    assert isinstance(transformers_engine, TransformersVlmEngine)
    assert transformers_engine.batch_size == 3
    vllm_engine = engine_for(
        StageSettings(vlm=VlmSettings(model="Qwen/Qwen2-VL-2B-Instruct", engine="vllm"))
    )
    assert isinstance(vllm_engine, VllmVlmEngine)
    assert vllm_engine.model_id == "Qwen/Qwen2-VL-2B-Instruct"
    with pytest.raises(ModelLoadError):
        engine_for(StageSettings())


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_missing_says_how_to_install_it() -> None:
    engine = VllmVlmEngine("Qwen/Qwen2-VL-2B-Instruct")
    with pytest.raises(ModelUnavailable, match=r"vllm.*extra") as caught:
        engine.load()
    assert caught.value.code == "model_unavailable"
    with pytest.raises(RuntimeError, match="load"):
        engine.caption([np.zeros((8, 8, 3), dtype=np.uint8)], PROMPT, 4)
