"""Which sinks a finished video goes to, and in what order: the writer's line-up."""

from __future__ import annotations

from core.config import StorageSettings
from models.base import ImageEmbeddingModel, TextEmbeddingModel
from sinks.base import Sink
from sinks.fingerprints import LanceFingerprintSink
from sinks.images import LanceImageIndex
from sinks.lance import LanceFrameSink, LanceSummarySink
from sinks.object_store import ResultDocumentSink
from sinks.search import LanceSearchIndex
from sinks.segments import LanceSegmentSink


def sinks_from_settings(
    storage: StorageSettings,
    embedding_dim: int | None = None,
    *,
    text_model: TextEmbeddingModel | None = None,
    image_model: ImageEmbeddingModel | None = None,
) -> list[Sink]:
    """Frames, result documents (with thumbnails), segments, the search index (with
    ``text_model``, which embeds the segments' text), the frame image vectors (with
    ``image_model``, the model that made them: it names their table, it is not loaded), the
    fingerprints (written only once a video has one), then the per-video summary.

    The summary goes last: a row in ``videos`` then means every other sink has the video.
    """
    searched: list[Sink] = (
        [] if text_model is None else [LanceSearchIndex.from_settings(storage, text_model)]
    )
    if image_model is not None:
        searched.append(LanceImageIndex.from_settings(storage, image_model.model_id))
    return [
        LanceFrameSink.from_settings(storage, embedding_dim=embedding_dim),
        ResultDocumentSink.from_settings(storage),
        LanceSegmentSink.from_settings(storage),
        *searched,
        LanceFingerprintSink.from_settings(storage),
        LanceSummarySink.from_settings(storage),
    ]
