"""The vector index: Lance table ``vectors`` of frame text embeddings, searched by cosine distance.

Only frames with an embedding are stored, and a run of frames showing the same text keeps only
its first frame: subtitles and slides stay on screen for many samples and would otherwise fill
the nearest neighbours with copies. Below ``index_min_rows`` rows a search is exact (a flat scan
is fast and has perfect recall); above it an ANN index is built in the background and then
extended with new rows as they arrive (``sinks.indexes``). Rows not yet in the index are still
searched (exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from core.config import StorageSettings
from core.records import SearchHit, VideoResult
from sinks.base import VectorIndex
from sinks.errors import SinkRejected
from sinks.indexes import IndexUpkeep, VectorIndexJob
from sinks.lance_rows import columns_table, sql_string, table_uri, video_predicate
from sinks.lance_table import EmbeddingRowsSink, LanceTable, map_lance_error

INDEX_NAME = "embedding_idx"


def vectors_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("video_id", pa.string(), nullable=False),
            pa.field("tenant", pa.string()),
            pa.field("frame_index", pa.int32(), nullable=False),
            pa.field("timestamp_s", pa.float64()),
            pa.field("text", pa.string()),
            pa.field("embedding", pa.list_(pa.float32(), dim)),
            pa.field("pipeline_version", pa.string()),
        ]
    )


class LanceVectorIndex(EmbeddingRowsSink, VectorIndex):
    """Nearest-neighbour search over frame embeddings, keyed by (video_id, frame_index)."""

    name = "lance_vectors"
    KEYS = ("video_id", "frame_index")

    def __init__(
        self,
        root: str | LanceTable,
        *,
        embedding_dim: int | None = None,
        index_min_rows: int = 10_000,
        index_refresh_rows: int | None = None,
        index_type: str = "IVF_SQ",
        nprobes: int = 8,
        refine_factor: int = 4,
    ) -> None:
        """``root``: the folder or ``s3://`` prefix of the tables, or the table itself."""
        if not isinstance(root, LanceTable):
            root = LanceTable(table_uri(root, "vectors"))
        self.table = root
        self._dim = embedding_dim
        # Unindexed rows are searched by a flat scan; fold them in once they are this many.
        refresh_rows = index_refresh_rows or max(1, index_min_rows // 4)
        job = VectorIndexJob(INDEX_NAME, min_rows=index_min_rows, refresh_rows=refresh_rows)
        self.upkeep = IndexUpkeep(root, [replace(job, index_type=index_type)])
        self.nprobes = nprobes
        self.refine_factor = refine_factor

    @classmethod
    def from_settings(
        cls, storage: StorageSettings, *, embedding_dim: int | None = None
    ) -> LanceVectorIndex:
        return cls(
            LanceTable.from_settings(storage, "vectors"),
            embedding_dim=embedding_dim,
            index_min_rows=storage.vector_index_min_rows,
        )

    @staticmethod
    def schema(dim: int) -> pa.Schema:
        return vectors_schema(dim)

    def written(self) -> None:
        self.upkeep.ask()

    def close(self) -> None:
        self.upkeep.close()

    @staticmethod
    def rows_of(results: Sequence[VideoResult], dim: int) -> pa.Table:
        columns: dict[str, list[Any]] = {name: [] for name in vectors_schema(dim).names}
        for result in results:
            previous_text: str | None = None
            seen: set[int] = set()
            for frame in sorted(result.frames, key=lambda f: (f.timestamp_s, f.index)):
                if frame.embedding is None or frame.index in seen:
                    continue
                text = frame.text
                if text and text == previous_text:
                    continue  # same text as the frame before: its first timestamp is kept
                previous_text = text
                seen.add(frame.index)
                columns["video_id"].append(result.ref.video_id)
                columns["tenant"].append(result.ref.tenant)
                columns["frame_index"].append(frame.index)
                columns["timestamp_s"].append(float(frame.timestamp_s))
                columns["text"].append(text)
                columns["embedding"].append(frame.embedding)
                columns["pipeline_version"].append(result.pipeline_version)
        return columns_table(columns, vectors_schema(dim))

    def has_index(self) -> bool:
        dataset = self.table.open()
        return dataset is not None and any(
            index.name == INDEX_NAME for index in dataset.describe_indices()
        )

    def search(
        self,
        vector: Sequence[float] | npt.NDArray[np.floating[Any]],
        *,
        k: int = 10,
        tenant: str | None = None,
    ) -> list[SearchHit]:
        """The ``k`` frames nearest to ``vector`` (cosine distance), of ``tenant`` if given."""
        dataset = self.table.open()
        if dataset is None or k <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).ravel()
        dim = int(dataset.schema.field("embedding").type.list_size)
        if query.shape[0] != dim:
            raise SinkRejected(
                f"query has {query.shape[0]} dimensions, the index has {dim}",
                code="sink_embedding_dim_mismatch",
            )
        nearest = {
            "column": "embedding",
            "q": query,
            "k": k,
            "metric": "cosine",
            "nprobes": self.nprobes,
            "refine_factor": self.refine_factor,
            "ef": max(64, 2 * k),
        }
        try:
            table = dataset.to_table(
                # Asked for by name: Lance warns when a vector search leaves the distance out
                # of the columns and adds it anyway (a behaviour it means to drop).
                columns=["video_id", "tenant", "frame_index", "timestamp_s", "text", "_distance"],
                nearest=nearest,
                filter=None if tenant is None else f"tenant = {sql_string(tenant)}",
                prefilter=True,  # filter first, so a tenant's k hits are not crowded out
            )
        except Exception as exc:
            raise map_lance_error(exc, table="vectors") from exc
        hits = [
            SearchHit(
                video_id=row["video_id"],
                tenant=row["tenant"],
                frame_index=row["frame_index"],
                timestamp_s=row["timestamp_s"],
                text=row["text"],
                score=float(row["_distance"]),
            )
            for row in table.to_pylist()
        ]
        hits.sort(key=lambda hit: hit.score)
        return hits

    def count_rows(self, video_id: str | None = None) -> int:
        return self.table.count_rows(None if video_id is None else video_predicate([video_id]))

    def vector_rows(self, video_id: str) -> list[dict[str, Any]]:
        """The stored vectors' rows of one video (without the vectors), in time order."""
        columns = ["video_id", "tenant", "frame_index", "timestamp_s", "text", "pipeline_version"]
        rows = self.table.rows(filter=video_predicate([video_id]), columns=columns)
        return sorted(rows, key=lambda row: row["timestamp_s"])
