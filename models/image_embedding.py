"""Image embeddings on CPU: a CLIP or SigLIP checkpoint in a local folder, run by transformers.

Both families put an image and the text describing it near each other in one space
(``get_image_features`` / ``get_text_features``), so a frame with nothing written in it is
still found by a text query. Weights are read from the folder only (``local_files_only``):
workers have no model hub.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.config import StageSettings
from core.records import Image, Vector
from models.base import ImageEmbeddingModel, require_rgb
from models.errors import InferenceFailed, ModelLoadError
from models.fingerprint import content_id


def image_embedder(settings: StageSettings) -> ClipEmbedder | None:
    """The engine ``settings`` ask for (not loaded yet); None when image embeddings are off."""
    if not settings.image_embed.model:
        return None
    return ClipEmbedder(
        settings.image_embed.model,
        threads=settings.image_embed.threads,
        batch_size=settings.image_embed.batch_size,
    )


class ClipEmbedder(ImageEmbeddingModel):
    """A CLIP-style model folder (``save_pretrained`` of the model and its processor)."""

    def __init__(self, model_path: str, *, threads: int = 1, batch_size: int = 16) -> None:
        self.model_path = model_path
        self.threads = threads
        self.batch_size = batch_size
        self._model: Any = None
        self._processor: Any = None
        self._text_padding: str | bool = True
        self._max_length: int | None = None
        self._dimension = 0

    @property
    def model_id(self) -> str:
        """The folder's name and its content's id (``models.fingerprint``): another model, or
        new weights, under the same name give another id, so their vectors never mix."""
        if not (Path(self.model_path) / "config.json").is_file():
            raise ModelLoadError(f"no image embedding model at {self.model_path}")
        return f"{Path(self.model_path).resolve().name}-{content_id(self.model_path)}"

    @property
    def dimension(self) -> int:
        if not self._dimension:
            raise RuntimeError("ClipEmbedder.load() must run before its dimension is known")
        return self._dimension

    def load(self) -> None:
        try:
            # torch and transformers are imported in the worker only (see models.embedding).
            import torch
            from transformers import AutoModel, AutoProcessor
            from transformers.utils import logging as hf_logging

            torch.set_num_threads(self.threads)
            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            processor = AutoProcessor.from_pretrained(self.model_path, local_files_only=True)
            model: Any = AutoModel.from_pretrained(self.model_path, local_files_only=True)
            model.eval()
        except Exception as exc:
            raise ModelLoadError(
                f"cannot load image embedder from {self.model_path}: {exc}"
            ) from exc
        if not all(hasattr(model, f) for f in ("get_image_features", "get_text_features")):
            raise ModelLoadError(f"{self.model_path} is not a CLIP-style image-text model")
        self._model, self._processor = model, processor
        # SigLIP is trained on texts padded to the full length; CLIP on the longest of a batch.
        is_siglip = str(model.config.model_type).startswith("siglip")
        self._text_padding = "max_length" if is_siglip else True
        # The tokenizer's own limit may be unset; the position table's never is.
        text_config = getattr(model.config, "text_config", None)
        self._max_length = getattr(text_config, "max_position_embeddings", None)
        self._dimension = int(self.embed_texts(["a"]).shape[1])

    def embed_images(self, images: list[Image]) -> Vector:
        checked = [require_rgb(image) for image in images]
        return self._embedded(checked, "image")

    def embed_texts(self, texts: list[str]) -> Vector:
        return self._embedded(texts, "text")

    def _embedded(self, items: list[Any], kind: str) -> Vector:
        """``items`` (images or texts) through the model's tower for ``kind``, in batches."""
        if self._model is None:
            raise RuntimeError("ClipEmbedder.load() must run before it embeds")
        if not items:
            return np.zeros((0, self._dimension), dtype=np.float32)
        import torch

        parts = []
        try:
            for start in range(0, len(items), self.batch_size):
                batch = items[start : start + self.batch_size]
                with torch.inference_mode():
                    out = self._forward(batch, kind)
                # transformers 5 returns the projected vectors as the pooler output.
                vectors = out if isinstance(out, torch.Tensor) else out.pooler_output
                parts.append(vectors.float().numpy())
        except Exception as exc:
            raise InferenceFailed(f"{kind} embedding failed on {len(items)} inputs: {exc}") from exc
        stacked = np.concatenate(parts).astype(np.float32)
        norms = np.linalg.norm(stacked, axis=1, keepdims=True)
        normalised: Vector = stacked / np.maximum(norms, 1e-12)
        return normalised

    def _forward(self, batch: list[Any], kind: str) -> Any:
        if kind == "image":
            pixels = self._processor(images=batch, return_tensors="pt")
            return self._model.get_image_features(pixel_values=pixels["pixel_values"])
        tokens = self._processor(
            text=batch,
            padding=self._text_padding,
            truncation=True,
            max_length=self._max_length,
            return_tensors="pt",
        )
        inputs = {k: v for k, v in tokens.items() if k in ("input_ids", "attention_mask")}
        return self._model.get_text_features(**inputs)

    def close(self) -> None:
        self._model = self._processor = None
