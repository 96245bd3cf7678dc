"""Model engine interfaces.

An engine wraps one model library behind a small, typed surface so that stages stay thin and
a different backend (another OCR library, vLLM instead of transformers) can replace one without
touching the stage. Like a stage, an engine's constructor stores configuration only; ``load()``
reads weights inside the worker; ``close()`` frees them. Library exceptions are mapped once,
here at the boundary, to the errors in ``models.errors``.
"""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from core.records import Image, OcrLine, Vector
from models.errors import InvalidAudio, InvalidImage


def package_version(package: str) -> str:
    """The installed version of ``package`` ("missing" where it is not installed), for the
    model ids: a library's upgrade may change what its model gives."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "missing"


def cache_dir() -> Path:
    """Where engines keep what they make from shipped weights once (an export, a model
    joined from parts): ``$XDG_CACHE_HOME/reelsense``, ``~/.cache/reelsense`` where unset."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reelsense"


class ModelEngine(ABC):
    """Lifecycle shared by every engine."""

    @property
    @abstractmethod
    def model_id(self) -> str:
        """A stable name of the weights and library that produce the output; known before
        ``load()`` so that the pipeline version can be computed without loading anything."""

    @abstractmethod
    def load(self) -> None:
        """Load the weights; runs once in the worker. Raises ``ModelLoadError`` or
        ``ModelUnavailable``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what ``load()`` took."""


class OcrModel(ModelEngine):
    """Reads the text written in an image."""

    @abstractmethod
    def read(self, image: Image) -> list[OcrLine]:
        """Text lines found in an RGB ``H x W x 3`` uint8 image, in reading order."""


class TextEmbeddingModel(ModelEngine):
    """Turns texts into vectors for similarity search."""

    @property
    @abstractmethod
    def dimension(self) -> int:
        """Length of every vector ``embed`` returns."""

    @abstractmethod
    def embed(self, texts: list[str]) -> Vector:
        """An ``(len(texts), dimension)`` float32 array of L2-normalised rows: the texts as
        passages, the side that is indexed."""

    def embed_queries(self, texts: list[str]) -> Vector:
        """The texts as search queries; the same as ``embed`` for symmetric models."""
        return self.embed(texts)


class ImageEmbeddingModel(ModelEngine):
    """Puts images and texts in one vector space (CLIP, SigLIP): a text finds the images it
    describes, whatever is written in them."""

    @property
    @abstractmethod
    def dimension(self) -> int:
        """Length of every vector; known once loaded."""

    @abstractmethod
    def embed_images(self, images: list[Image]) -> Vector:
        """An ``(len(images), dimension)`` float32 array of L2-normalised rows, one per RGB
        ``H x W x 3`` uint8 image."""

    @abstractmethod
    def embed_texts(self, texts: list[str]) -> Vector:
        """The texts in the same space, rows L2-normalised."""


class VlmEngine(ModelEngine):
    """A vision-language model that answers a prompt about each image."""

    @abstractmethod
    def caption(
        self,
        images: list[Image],
        prompt: str,
        max_new_tokens: int,
        schema: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """One answer per RGB image, in order, decoded greedily (same input, same output);
        with ``schema``, each answer is JSON that the JSON schema accepts (constrained
        decoding), unless ``max_new_tokens`` cuts it short."""

    async def caption_async(
        self,
        images: list[Image],
        prompt: str,
        max_new_tokens: int,
        schema: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """``caption`` for a caller on an event loop: in a worker thread, unless the engine
        has an async engine of its own (vLLM's, batching requests continuously)."""
        return await asyncio.to_thread(self.caption, images, prompt, max_new_tokens, schema)


@dataclass(frozen=True)
class Detection:
    """One thing a visual detector found: its label (the detector's own words: ``face``,
    ``EXPOSED_BREAST_F``), how sure it is (0 to 1) and its box ``(x0, y0, x1, y1)`` in the
    frame's pixels."""

    label: str
    score: float
    box: tuple[float, float, float, float]


@runtime_checkable
class VisualDetector(Protocol):
    """Finds labelled boxes in a frame: faces, nudity, weapons. The built-in ``faces``
    (``models.faces``) is one; a package adds others through the entry-point group
    ``reelsense.detectors`` (``models.detectors``). Like an engine: ``model_id`` is known
    before ``load()``, ``load()`` runs once in the worker, ``close()`` frees the weights."""

    @property
    def name(self) -> str:
        """Short and snake_case: it names the detector in the results and the settings."""

    @property
    def model_id(self) -> str:
        """A stable name of the weights and library; it feeds the pipeline version."""

    def load(self) -> None: ...

    def close(self) -> None: ...

    def detect(self, image: Image) -> list[Detection]:
        """What is found in an RGB ``H x W x 3`` uint8 image; [] where nothing is."""


def require_rgb(image: object) -> Image:
    """``image`` if it is an ``H x W x 3`` uint8 array, else ``InvalidImage``: checked before a
    library sees it, so that a bad frame fails permanently instead of as a retryable crash."""
    if not isinstance(image, np.ndarray):
        raise InvalidImage(f"expected a numpy image, got {type(image).__name__}")
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise InvalidImage(f"expected H x W x 3 uint8 RGB, got {image.dtype} {image.shape}")
    if image.shape[0] < 1 or image.shape[1] < 1:
        raise InvalidImage(f"empty image {image.shape}")
    return image


def require_audio(samples: object) -> npt.NDArray[np.float32]:
    """``samples`` if it is 1-D finite float32, else ``InvalidAudio``: checked before a
    library sees it, so that bad input fails permanently instead of as a retryable crash."""
    if not isinstance(samples, np.ndarray):
        raise InvalidAudio(f"expected a numpy array of samples, got {type(samples).__name__}")
    if samples.dtype != np.float32 or samples.ndim != 1:
        raise InvalidAudio(f"expected 1-D float32 samples, got {samples.dtype} {samples.shape}")
    if not np.isfinite(samples).all():
        raise InvalidAudio("samples contain NaN or infinity")
    return samples
