"""Lance tables of results: ``frames`` (one row per sampled frame) and ``videos`` (one per video).

Both tables live under ``StorageSettings.lance_uri`` (a folder or ``s3://bucket/prefix``) and are
written by upserts keyed by the video, so a write is idempotent and a video re-processed under a
new pipeline version ends up with exactly its new rows (see ``sinks.lance_table``: the keys are
the tables' primary keys, so racing writers do not duplicate rows).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from core.config import StorageSettings
from core.records import VideoResult
from sinks.lance_rows import columns_table, latest_per_video, sql_string, table_uri, video_predicate
from sinks.lance_table import LanceTable
from sinks.table_sinks import EmbeddingRowsSink, TableSink


def frames_schema(dim: int) -> pa.Schema:
    line = pa.struct([("text", pa.string()), ("score", pa.float32())])
    return pa.schema(
        [
            pa.field("video_id", pa.string(), nullable=False),
            pa.field("tenant", pa.string()),
            pa.field("frame_index", pa.int32()),
            pa.field("timestamp_ms", pa.int64(), nullable=False),
            pa.field("timestamp_s", pa.float64()),
            pa.field("keyframe", pa.bool_()),
            pa.field("ocr_text", pa.string()),
            pa.field("ocr_lines", pa.list_(line)),
            pa.field("caption", pa.string()),
            # What stages from other packages found in the frame (``Frame.extras``), as JSON.
            pa.field("extras", pa.string()),
            pa.field("embedding", pa.list_(pa.float32(), dim)),
            pa.field("pipeline_version", pa.string()),
            pa.field("written_at", pa.timestamp("us", tz="UTC")),
        ]
    )


class LanceFrameSink(EmbeddingRowsSink):
    """Table ``frames``: one row per sampled frame, keyed by (video_id, timestamp_ms)."""

    name = "lance_frames"
    KEYS = ("video_id", "timestamp_ms")

    def __init__(self, root: str | LanceTable, *, embedding_dim: int | None = None) -> None:
        """``root``: the folder or ``s3://`` prefix of the tables, or the table itself."""
        self.table = root if isinstance(root, LanceTable) else LanceTable(table_uri(root, "frames"))
        self._dim = embedding_dim

    @classmethod
    def from_settings(
        cls, storage: StorageSettings, *, embedding_dim: int | None = None
    ) -> LanceFrameSink:
        return cls(LanceTable.from_settings(storage, "frames"), embedding_dim=embedding_dim)

    @staticmethod
    def schema(dim: int) -> pa.Schema:
        return frames_schema(dim)

    @staticmethod
    def rows_of(results: Sequence[VideoResult], dim: int) -> pa.Table:
        written_at = datetime.now(UTC)
        columns: dict[str, list[Any]] = {name: [] for name in frames_schema(dim).names}
        for result in results:
            seen: set[int] = set()
            for frame in sorted(result.frames, key=lambda f: f.timestamp_s):
                # The key is integral milliseconds: float keys do not match reliably.
                timestamp_ms = round(frame.timestamp_s * 1000)
                if timestamp_ms in seen:
                    continue  # two frames in one millisecond: a duplicate key would be ambiguous
                seen.add(timestamp_ms)
                columns["video_id"].append(result.ref.video_id)
                columns["tenant"].append(result.ref.tenant)
                columns["frame_index"].append(frame.index)
                columns["timestamp_ms"].append(timestamp_ms)
                columns["timestamp_s"].append(float(frame.timestamp_s))
                columns["keyframe"].append(bool(frame.keyframe))
                columns["ocr_text"].append(frame.ocr_text)
                columns["ocr_lines"].append(
                    [{"text": line.text, "score": float(line.score)} for line in frame.ocr_lines]
                )
                columns["caption"].append(frame.caption)
                columns["extras"].append(
                    json.dumps(frame.extras, sort_keys=True) if frame.extras else None
                )
                columns["embedding"].append(frame.embedding)
                columns["pipeline_version"].append(result.pipeline_version)
                columns["written_at"].append(written_at)
        return columns_table(columns, frames_schema(dim))

    def frame_rows(self, video_id: str, *, with_embedding: bool = False) -> list[dict[str, Any]]:
        """The frames of one video in time order (embeddings left out unless asked for)."""
        schema = self.table.schema()
        if schema is None:
            return []
        columns = [n for n in schema.names if with_embedding or n != "embedding"]
        rows = self.table.rows(filter=f"video_id = {sql_string(video_id)}", columns=columns)
        return sorted(rows, key=lambda row: row["timestamp_ms"])

    def count_rows(self, video_id: str | None = None) -> int:
        return self.table.count_rows(None if video_id is None else video_predicate([video_id]))


def videos_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("video_id", pa.string(), nullable=False),
            pa.field("tenant", pa.string()),
            pa.field("uri", pa.string()),
            pa.field("pipeline_version", pa.string()),
            pa.field("container", pa.string()),
            pa.field("codec", pa.string()),
            pa.field("duration_s", pa.float64()),
            pa.field("fps", pa.float64()),
            pa.field("width", pa.int32()),
            pa.field("height", pa.int32()),
            pa.field("frames", pa.int32()),
            pa.field("text", pa.string()),
            pa.field("metadata", pa.string()),  # JSON
            pa.field("timings", pa.string()),  # JSON
            pa.field("completed_at", pa.timestamp("us", tz="UTC")),
            pa.field("written_at", pa.timestamp("us", tz="UTC")),
        ]
    )


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class LanceSummarySink(TableSink):
    """Table ``videos``: one row per video, keyed by video_id."""

    name = "lance_videos"

    def __init__(self, root: str | LanceTable) -> None:
        """``root``: the folder or ``s3://`` prefix of the tables, or the table itself."""
        self.table = root if isinstance(root, LanceTable) else LanceTable(table_uri(root, "videos"))

    @classmethod
    def from_settings(cls, storage: StorageSettings) -> LanceSummarySink:
        return cls(LanceTable.from_settings(storage, "videos"))

    def open(self) -> None:
        self.table.create(videos_schema(), keys=("video_id",))

    def write(self, results: Sequence[VideoResult]) -> None:
        results = latest_per_video(results)
        if results:
            rows = self.rows_of(results)
            self.table.upsert(rows, keys=["video_id"], video_ids=[r.ref.video_id for r in results])

    @staticmethod
    def rows_of(results: Sequence[VideoResult]) -> pa.Table:
        written_at = datetime.now(UTC)
        rows = [
            {
                "video_id": r.ref.video_id,
                "tenant": r.ref.tenant,
                "uri": r.ref.uri,
                "pipeline_version": r.pipeline_version,
                "container": r.probe.container,
                "codec": r.probe.codec,
                "duration_s": float(r.probe.duration_s),
                "fps": float(r.probe.fps),
                "width": r.probe.width,
                "height": r.probe.height,
                "frames": len(r.frames),
                "text": r.text,
                "metadata": json.dumps(r.ref.metadata, sort_keys=True, default=str),
                "timings": json.dumps(r.timings, sort_keys=True),
                "completed_at": _utc(r.completed_at),
                "written_at": written_at,
            }
            for r in results
        ]
        return pa.Table.from_pylist(rows, schema=videos_schema())

    def video_row(self, video_id: str) -> dict[str, Any] | None:
        """The summary of one video with ``metadata`` and ``timings`` decoded, or None."""
        rows = self.table.rows(filter=f"video_id = {sql_string(video_id)}", limit=1)
        return _decoded(rows[0]) if rows else None

    def video_rows(self, *, tenant: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Summaries, most recently completed first."""
        where = None if tenant is None else f"tenant = {sql_string(tenant)}"
        rows = [_decoded(row) for row in self.table.rows(filter=where)]
        rows.sort(key=lambda row: row["completed_at"], reverse=True)
        return rows[:limit]

    def count_rows(self) -> int:
        return self.table.count_rows()


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    for name in ("metadata", "timings"):
        row[name] = json.loads(row[name]) if row.get(name) else {}
    return row
