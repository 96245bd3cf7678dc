"""The embedding stage: one vector per frame for what is known about it in words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.config import ServiceConfig, StageSettings
from core.records import TEXT_FIELDS, Chunk, Frame
from core.stage_names import EMBED
from models.base import TextEmbeddingModel
from models.embedding import text_embedder
from stages.base import Fusion, Resources, Stage


class EmbedStage(Stage[Chunk, Chunk]):
    """Fills ``frame.embedding`` from ``frame.text`` (OCR text, then caption).

    Frames without any text get ``None``: an embedding of the empty string would match every
    other empty frame and nothing useful. All texts of a batch (across chunks and videos) go
    to the model in one call.
    """

    name = EMBED
    reads = TEXT_FIELDS  # a frame's text: what the stages that fill these found
    fills = ("embedding",)
    # Measured peak resident, batches of 64 texts: see the README (multilingual E5 on its C
    # engine, or MiniLM with torch); no memory is reserved unless a deployment sets
    # ``ray.embed.memory_mb``.
    resources = Resources(cpus=0.3)
    fusion = Fusion.PER_CORE

    def __init__(self, settings: StageSettings) -> None:
        self._settings = settings
        self._embedder: TextEmbeddingModel | None = None

    @classmethod
    def build(cls, config: ServiceConfig) -> EmbedStage:
        return cls(config.stages)

    def version_params(self) -> Mapping[str, object]:
        # The engine's id names the model and its release: a new embedder re-embeds every
        # video from its stored text (nothing is decoded again).
        model = text_embedder(self._settings.embed.model).model_id
        return {"model": model, "normalized": True}

    def setup(self) -> None:
        settings = self._settings
        embedder = text_embedder(settings.embed.model, threads=settings.embed.threads)
        embedder.load()
        self._embedder = embedder

    @property
    def dimension(self) -> int:
        """The length of the vectors this stage writes (after ``setup()``)."""
        if self._embedder is None:
            raise RuntimeError("EmbedStage.setup() must run before dimension is known")
        return self._embedder.dimension

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        if self._embedder is None:
            raise RuntimeError("EmbedStage.setup() must run before process_batch()")
        with_text: list[Frame] = []
        for chunk in items:
            for frame in chunk.frames:
                if frame.text.strip():
                    with_text.append(frame)
                else:
                    frame.embedding = None
        if with_text:
            vectors = self._embedder.embed([frame.text for frame in with_text])
            for frame, vector in zip(with_text, vectors, strict=True):
                frame.embedding = vector
        return list(items)

    def teardown(self) -> None:
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None
