"""A tiny random Qwen2-VL checkpoint, built offline in milliseconds for tests.

No VLM weights can be downloaded here, so tests build one: a byte-level BPE tokenizer (as
Qwen2's: every byte is a token, so it can write any text, JSON included) trained on a few
words plus Qwen2-VL's special tokens, the real Qwen2-VL image processor, and a two-layer
``Qwen2VLForConditionalGeneration`` with random weights, all saved with ``save_pretrained`` so
that the engine loads them exactly as it loads a real checkpoint. Its answers are random
text, but they come out of the real preprocessing, vision tower and greedy generation.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2VLConfig, Qwen2VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.utils import logging as hf_logging

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
_TEXT = (
    "a the frame shows text on screen man woman cat dog street car sign red blue green white "
    "black night day people road shop menu price invoice total describe this video in one "
    "sentence . system user assistant you are helpful"
)
WORDS = tuple(sorted(set(_TEXT.split(" "))))
# What the merges are learnt from: the words, and JSON shaped like the VLM's answers.
_CORPUS = (
    _TEXT,
    '{"caption":"a man on the street","tags":["street","night"],"objects":["car","sign"],'
    '"on_screen_text":"","scene_type":"outdoor","safety":[]}',
)
# 4 merged patches at most: a handful of image tokens per frame keeps generation fast.
MAX_PIXELS = 28 * 28 * 4


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A small byte-level BPE tokenizer with Qwen2-VL's special tokens (deterministic)."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_CORPUS, trainer=trainer)
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        eos_token="<|im_end|>",  # noqa: S106 - a token of the vocabulary, not a password
        pad_token="<|endoftext|>",  # noqa: S106
    )


def build_tiny_qwen2_vl(
    path: Path, *, seed: int = 0, max_pixels: int = MAX_PIXELS, wide_heads: bool = False
) -> Path:
    """Write a tiny random Qwen2-VL checkpoint (model, tokenizer, image processor) to ``path``.

    Its attention heads are 8 wide, or with ``wide_heads`` 32 (twice the width, half the heads):
    the narrowest vLLM's CPU attention takes."""
    path.mkdir(parents=True, exist_ok=True)
    head = 32 if wide_heads else 8
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    tokenizer = byte_level_tokenizer()
    vocab = tokenizer.get_vocab()
    images = Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=max_pixels)
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 2 * head if wide_heads else 32,
            "intermediate_size": 4 * head if wide_heads else 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2 if wide_heads else 4,
            "num_key_value_heads": 1 if wide_heads else 2,
            "max_position_embeddings": 1024,
            # M-RoPE shares a head's rotary frequencies (half its width) among time, height
            # and width.
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [4, 6, 6] if wide_heads else [1, 1, 2],
                "rope_theta": 1e4,
            },
            "bos_token_id": vocab["<|endoftext|>"],
            "eos_token_id": vocab["<|im_end|>"],
            "pad_token_id": vocab["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "embed_dim": 2 * head if wide_heads else 32,
            "hidden_size": 2 * head if wide_heads else 32,
            "num_heads": 2 if wide_heads else 4,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            # Large random weights so that the frame visibly changes the (random) answers.
            "initializer_range": 0.5,
        },
        image_token_id=vocab["<|image_pad|>"],
        video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"],
        vision_end_token_id=vocab["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = vocab["<|im_end|>"]
    model.generation_config.pad_token_id = vocab["<|endoftext|>"]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    images.save_pretrained(path)
    return path
