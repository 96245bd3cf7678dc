"""A tiny random Qwen2-VL checkpoint, built offline in milliseconds for tests.

No VLM weights can be downloaded here, so tests build one: a word-level tokenizer over a few
words plus Qwen2-VL's special tokens, the real Qwen2-VL image processor, and a two-layer
``Qwen2VLForConditionalGeneration`` with random weights, all saved with ``save_pretrained`` so
that the engine loads them exactly as it loads a real checkpoint. Its captions are random
words, but they come out of the real preprocessing, vision tower and greedy generation.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
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
# 4 merged patches at most: a handful of image tokens per frame keeps generation fast.
MAX_PIXELS = 28 * 28 * 4


def build_tiny_qwen2_vl(path: Path, *, seed: int = 0, max_pixels: int = MAX_PIXELS) -> Path:
    """Write a tiny random Qwen2-VL checkpoint (model, tokenizer, image processor) to ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, "<unk>", *WORDS))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
    )
    images = Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=max_pixels)
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 1024,
            # M-RoPE shares the 4 rotary frequencies of each 8-dim head among time, height
            # and width.
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [1, 1, 2],
                "rope_theta": 1e4,
            },
            "bos_token_id": vocab["<|endoftext|>"],
            "eos_token_id": vocab["<|im_end|>"],
            "pad_token_id": vocab["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": 32,
            "num_heads": 4,
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
