"""The image embedding stage: a vector per frame from its pixels (CLIP or SigLIP)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.config import ServiceConfig, StageSettings
from core.records import Chunk, Frame
from core.stage_names import IMAGE_EMBED
from models.base import ImageEmbeddingModel
from models.image_embedding import image_embedder
from stages.base import PIXELS, EngineStage, Fusion, Resources


class ImageEmbedStage(EngineStage[ImageEmbeddingModel]):
    """Fills ``frame.image_embedding`` for every frame that still has its pixels (a repeated
    sample takes its original's afterwards, as with every image stage).

    Only built when ``settings.image_embed.model`` is set; the frames of every chunk in a
    batch (possibly of different videos) go to the model together.
    """

    name = IMAGE_EMBED
    reads = (PIXELS,)
    fills = ("image_embedding",)
    # A small CLIP on CPU; no memory is reserved unless a deployment sets
    # ``ray.image_embed.memory_mb``. Size ``stages.image_embed.threads`` to the CPUs a replica
    # gets.
    resources = Resources(cpus=0.5)
    fusion = Fusion.PER_CORE

    def __init__(self, settings: StageSettings) -> None:
        if not settings.image_embed.model:
            raise ValueError("ImageEmbedStage needs settings.image_embed.model")
        self._settings = settings

    @classmethod
    def build(cls, config: ServiceConfig) -> ImageEmbedStage | None:
        return cls(config.stages) if config.stages.image_embed.model else None

    def new_engine(self) -> ImageEmbeddingModel:
        engine = image_embedder(self._settings)
        assert engine is not None  # checked in the constructor
        return engine

    def version_params(self) -> Mapping[str, object]:
        # Threads and batch size change speed only, so they are left out.
        return {"model": self.new_engine().model_id, "normalized": True}

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        engine = self.engine
        frames: list[Frame] = [
            frame for chunk in items for frame in chunk.frames if frame.image is not None
        ]
        if frames:
            images = [frame.image for frame in frames if frame.image is not None]
            vectors = engine.embed_images(images)
            for frame, vector in zip(frames, vectors, strict=True):
                frame.image_embedding = vector
        return list(items)
