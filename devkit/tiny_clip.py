"""A tiny random CLIP checkpoint, built offline in milliseconds for tests.

No image-text weights can be downloaded here, so tests build one the way a real checkpoint
is laid out: ``CLIPModel`` with two-layer towers and random weights, the byte-level BPE
tokenizer of ``devkit.tiny_vlm`` and CLIP's own image processor, all saved with
``save_pretrained`` so that the engine loads them exactly as it loads a real model. Its
vectors mean nothing, but they come out of the real preprocessing and both towers.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import CLIPConfig, CLIPModel, CLIPProcessor
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
from transformers.utils import logging as hf_logging

from devkit.tiny_vlm import byte_level_tokenizer

IMAGE_SIDE = 32
TEXT_POSITIONS = 32


def build_tiny_clip(path: Path, *, seed: int = 0, dim: int = 16) -> Path:
    """Write a tiny random CLIP checkpoint (model, tokenizer, image processor) to ``path``;
    its vectors have ``dim`` dimensions."""
    path.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    tokenizer = byte_level_tokenizer()
    tokenizer.model_max_length = TEXT_POSITIONS
    tower = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
    }
    config = CLIPConfig(
        text_config={
            **tower,
            "vocab_size": len(tokenizer),
            "max_position_embeddings": TEXT_POSITIONS,
            # 2 pools each text at its highest token id (CLIP's original rule): this tokenizer
            # adds no end-of-text token to pool at.
            "eos_token_id": 2,
            "bos_token_id": tokenizer.pad_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={**tower, "image_size": IMAGE_SIDE, "patch_size": 8},
        projection_dim=dim,
    )
    torch.manual_seed(seed)
    CLIPModel(config).save_pretrained(path)
    images = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIDE}, crop_size={"height": IMAGE_SIDE, "width": IMAGE_SIDE}
    )
    CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(path)
    return path
