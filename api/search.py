"""The search the API answers with: the segments' search index under the configured text
model, queried off the event loop."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from core.config import ServiceConfig
from core.search import Method, SearchFilter, SegmentHit

if TYPE_CHECKING:
    from sinks.search import LanceSearchIndex


class SegmentSearch:
    """Query -> ``LanceSearchIndex.search`` in a worker thread.

    The model loads in the background from the start (it takes milliseconds for the default
    E5, seconds for a sentence-transformers model), so the first query waits for it only if it
    comes very early.
    """

    def __init__(self, ready: Future[LanceSearchIndex]) -> None:
        self._ready = ready

    @classmethod
    def from_config(cls, config: ServiceConfig) -> SegmentSearch:
        loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="search-load")
        ready = loader.submit(_index, config)
        loader.shutdown(wait=False)
        return cls(ready)

    @classmethod
    def over(cls, index: LanceSearchIndex) -> SegmentSearch:
        ready: Future[LanceSearchIndex] = Future()
        ready.set_result(index)
        return cls(ready)

    async def __call__(
        self, query: str, k: int, where: SearchFilter, method: Method
    ) -> list[SegmentHit]:
        index = await asyncio.wrap_future(self._ready)
        return await asyncio.to_thread(index.search, query, k=k, where=where, method=method)


def _index(config: ServiceConfig) -> LanceSearchIndex:
    """The search index of the configured text model, with the frames of the configured image
    model (if any) as a third list of hybrid searches."""
    from models.embedding import text_embedder
    from models.image_embedding import image_embedder
    from sinks.images import ImageSearch, LanceImageIndex
    from sinks.search import LanceSearchIndex

    stages = config.stages
    embedder = text_embedder(stages.embed.model, threads=stages.embed.threads)
    embedder.load()
    images = None
    if (image_model := image_embedder(stages)) is not None:
        image_model.load()
        table = LanceImageIndex.from_settings(config.storage, image_model.model_id)
        images = ImageSearch(table, image_model)
    return LanceSearchIndex.from_settings(config.storage, embedder, images=images)
