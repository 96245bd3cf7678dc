"""Sinks whose rows live in one Lance table (``sinks.lance_table``): the table's deletion and
purge steps, and the write of per-frame rows with vectors of one dimension."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

import numpy as np
import pyarrow as pa

from core.records import VideoRef, VideoResult
from sinks.base import Sink
from sinks.lance_rows import latest_per_video
from sinks.lance_table import LanceTable

# The table's logger, as before these sinks moved out of ``sinks.lance_table``.
log = logging.getLogger("sinks.lance_table")

_WARNED_DIMS: set[str] = set()  # tables whose vectors' size was said not to fit


class TableSink(Sink):
    """A sink whose rows live in one Lance table, ``table``."""

    table: LanceTable

    def forget(self, videos: Sequence[VideoRef]) -> None:
        self.table.forget([video.video_id for video in videos])

    def purge_in(self) -> float | None:
        return self.table.purges.next_in()

    def purge(self) -> float | None:
        return self.table.purge()


class EmbeddingRowsSink(TableSink):
    """A table of per-frame rows with an embedding column of one dimension (frames, frame
    image vectors)."""

    KEYS: ClassVar[tuple[str, ...]]
    table: LanceTable
    _dim: int | None

    @staticmethod
    @abstractmethod
    def schema(dim: int) -> pa.Schema: ...

    @staticmethod
    @abstractmethod
    def rows_of(results: Sequence[VideoResult], dim: int) -> pa.Table: ...

    def open(self) -> None:
        """Create the table now if its embedding dimension is known already."""
        if self._dim is not None:
            self.table.create(self.schema(self._dim), keys=self.KEYS)

    def embedding_dim(self, results: Sequence[VideoResult] = ()) -> int:
        return self.table.embedding_dim(self._dim, results)

    def write(self, results: Sequence[VideoResult]) -> None:
        results = latest_per_video(results)
        if not results:
            return
        dim = self.embedding_dim(results)
        rows = self.rows_of([self._fitted(result, dim) for result in results], dim)
        # Videos without rows still go through the upsert: their old rows must go.
        self.table.upsert(rows, keys=list(self.KEYS), video_ids=[r.ref.video_id for r in results])
        self.written()

    def _fitted(self, result: VideoResult, dim: int) -> VideoResult:
        """The result with vectors of another size than the table's left out: the table was
        made for another text model (search has a table per model, ``sinks.search``; a
        reprocessed video whose vectors are not here has its text embedded again)."""
        sizes = {int(np.size(f.embedding)) for f in result.frames if f.embedding is not None}
        if sizes <= {dim} or len(sizes) > 1:
            return result  # fits, or a result of mixed sizes: ``rows_of`` rejects it
        if self.table.name not in _WARNED_DIMS:
            _WARNED_DIMS.add(self.table.name)
            log.warning(
                "%s holds %d-d vectors; the text model's are kept out of it", self.table.name, dim
            )
        return replace(result, frames=[replace(f, embedding=None) for f in result.frames])

    def written(self) -> None:
        """After each write (index upkeep)."""
