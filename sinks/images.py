"""Frame image vectors: table ``frames_<image model>``, searched by the text of a query.

One row per analysed frame (a repeated sample is its original's row: a copy would only crowd
the nearest neighbours) with the vector an image-text model (CLIP, SigLIP) gave its pixels,
and the time it covers: from the sample to the next analysed one (the last one to the end of
the video). A query is embedded by the same model's text tower, so a frame with nothing
written in it is still found by what it shows. Like the search table, the table is named after
the model: vectors of two models never share an index. A video's write replaces its rows.

The rows also give a later run of the video its image embeddings back (``vectors``), so a
video re-processed with the same image model is not embedded again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from core.config import StorageSettings
from core.records import Frame, Vector, VideoResult
from models.base import ImageEmbeddingModel
from sinks.indexes import IndexUpkeep, VectorIndexJob
from sinks.lance_rows import columns_table, model_table_name, sql_string, table_uri
from sinks.lance_table import DEFAULT_EMBEDDING_DIM, LanceTable, map_lance_error
from sinks.table_sinks import EmbeddingRowsSink
from sinks.views import shot_at, views_of

FRAME_KIND = "frame"  # the kind of a search hit found by its pixels


def images_table_name(model_id: str) -> str:
    """``frames_<model>_<digest>``."""
    return model_table_name("frames", model_id)


def images_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("video_id", pa.string(), nullable=False),
            pa.field("tenant", pa.string()),
            pa.field("frame_index", pa.int32(), nullable=False),
            pa.field("start_s", pa.float64()),  # the sample's time
            pa.field("end_s", pa.float64()),  # the next analysed sample's, or the video's end
            pa.field("shot", pa.int32()),  # the shot at the middle, if it has a thumbnail
            pa.field("embedding", pa.list_(pa.float32(), dim)),
            pa.field("pipeline_version", pa.string()),
            pa.field("written_at", pa.timestamp("us", tz="UTC")),
        ]
    )


class LanceImageIndex(EmbeddingRowsSink):
    """The frame image vectors of every video under one image model, keyed by
    (video_id, frame_index)."""

    name = "lance_images"
    KEYS = ("video_id", "frame_index")

    def __init__(
        self, root: str | LanceTable, model_id: str, *, vector_index_min_rows: int = 10_000
    ) -> None:
        """``root``: the folder or ``s3://`` prefix of the tables, or the table itself."""
        if not isinstance(root, LanceTable):
            root = LanceTable(table_uri(root, images_table_name(model_id)))
        self.table = root
        self._dim = None  # the first vectors' (the model is not loaded to write them)
        vectors = VectorIndexJob(
            "embedding_idx", min_rows=vector_index_min_rows, refresh_rows=vector_index_min_rows // 4
        )
        self.upkeep = IndexUpkeep(root, [vectors])

    @classmethod
    def from_settings(cls, storage: StorageSettings, model_id: str) -> LanceImageIndex:
        table = LanceTable.from_settings(storage, images_table_name(model_id))
        return cls(table, model_id, vector_index_min_rows=storage.vector_index_min_rows)

    @staticmethod
    def schema(dim: int) -> pa.Schema:
        return images_schema(dim)

    def embedding_dim(self, results: Sequence[VideoResult] = ()) -> int:
        schema = self.table.schema()
        if schema is not None:
            return int(schema.field("embedding").type.list_size)
        found = (f.image_embedding for r in results for f in r.frames)
        first = next((v for v in found if v is not None), None)
        return DEFAULT_EMBEDDING_DIM if first is None else int(np.asarray(first).size)

    @staticmethod
    def rows_of(results: Sequence[VideoResult], dim: int) -> pa.Table:
        written_at = datetime.now(UTC)
        rows = [row for result in results for row in _frame_rows(result, written_at)]
        schema = images_schema(dim)
        return columns_table({name: [row[name] for row in rows] for name in schema.names}, schema)

    def written(self) -> None:
        self.upkeep.ask()

    def refresh(self) -> None:
        """Build or refresh the vector index now, in this thread."""
        self.upkeep.run_now()

    def close(self) -> None:
        self.upkeep.close()

    def vectors(self, video_id: str, pipeline_version: str) -> dict[int, Vector]:
        """The video's vectors by frame index, if its rows are of ``pipeline_version``."""
        rows = self.table.rows(
            filter=f"video_id = {sql_string(video_id)}",
            columns=["frame_index", "embedding", "pipeline_version"],
        )
        if any(row["pipeline_version"] != pipeline_version for row in rows):
            return {}
        return {
            int(row["frame_index"]): np.asarray(row["embedding"], dtype=np.float32)
            for row in rows
            if row["embedding"] is not None
        }

    def nearest(self, vector: Vector, k: int, where: str | None) -> list[dict[str, Any]]:
        """The ``k`` frames nearest ``vector`` among those ``where`` keeps (filtered first),
        nearest first, each with its cosine similarity as ``_value``."""
        dataset = self.table.open()
        if dataset is None:
            return []
        nearest = {"column": "embedding", "q": vector, "k": k, "metric": "cosine"}
        columns = ["video_id", "tenant", "frame_index", "start_s", "end_s", "shot", "_distance"]
        try:
            table = dataset.to_table(prefilter=True, nearest=nearest, filter=where, columns=columns)
        except Exception as exc:
            raise map_lance_error(exc, table=self.table.name) from exc
        found: list[dict[str, Any]] = table.to_pylist()
        for row in found:
            row["_value"] = 1.0 - float(row.pop("_distance"))
        found.sort(key=lambda row: -row["_value"])
        return found


class ImageSearch:
    """Frames for a text query: the query through the image model's text tower, then the
    nearest frame vectors. Rows come shaped as the search table's (kind ``frame``, no text),
    so that they fuse with its lists."""

    def __init__(self, index: LanceImageIndex, model: ImageEmbeddingModel) -> None:
        """``model``: loaded already."""
        self.index = index
        self.model = model

    def search(self, query: str, k: int, where: str | None) -> list[dict[str, Any]]:
        vector = np.asarray(self.model.embed_texts([query])[0], dtype=np.float32)
        rows = self.index.nearest(vector, k, where)
        for row in rows:
            row.update(kind=FRAME_KIND, segment=f"{FRAME_KIND}:{row['frame_index']}")
            row.update(text="", partial=False)
        return rows

    def close(self) -> None:
        self.index.close()
        self.model.close()


def _frame_rows(result: VideoResult, written_at: datetime) -> list[dict[str, Any]]:
    shots = views_of(result).shot_times
    frames = sorted(
        (f for f in result.frames if f.repeat_of is None and f.image_embedding is not None),
        key=lambda f: f.timestamp_s,
    )
    if not frames:
        return []
    ends = [f.timestamp_s for f in frames[1:]] + [_last_end(result, frames[-1])]
    return [
        {
            "video_id": result.ref.video_id,
            "tenant": result.ref.tenant,
            "frame_index": frame.index,
            "start_s": float(frame.timestamp_s),
            "end_s": float(end),
            "shot": shot_at(frame.timestamp_s, shots),
            "embedding": frame.image_embedding,
            "pipeline_version": result.pipeline_version,
            "written_at": written_at,
        }
        for frame, end in zip(frames, ends, strict=True)
    ]


def _last_end(result: VideoResult, last: Frame) -> float:
    """Where the last analysed sample stops showing: the video's end, or one frame on."""
    one_frame = 1.0 / max(result.probe.fps, 1.0)
    return max(result.probe.duration_s, last.timestamp_s + one_frame)
