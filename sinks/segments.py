"""Lance table ``segments``: what a video shows and says over time, one row per segment, as
``sinks.views`` derives them.

Kinds: ``shot`` (``core.shots``; attributes: how it begins, its keyframe and thumbnail key),
``text`` (on-screen text spans, ``core.spans``; attributes: box, score, samples),
``speech`` (transcript segments, ``core.speech``; attributes: language, confidence, words),
``description`` (the VLM's description of a shot, ``core.description``: text is its caption,
attributes the whole description) and ``music`` and ``singing`` (audio events,
``core.speech.AudioEvent``: text is the kind, attributes its confidence). Rows are keyed by
(video_id, kind, seq), seq counting the segments of one kind in time order, and written by
the same video-keyed upsert as the other tables, so a video re-processed ends up with exactly
its new segments. Query it with any Lance or Arrow tool, e.g. every shot longer than ten
seconds, or every text shown for more than five.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from core.config import StorageSettings
from core.records import VideoResult
from sinks.lance_rows import latest_per_video, sql_string, table_uri
from sinks.lance_table import LanceTable
from sinks.table_sinks import TableSink
from sinks.views import views_of


def segments_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("video_id", pa.string(), nullable=False),
            pa.field("tenant", pa.string()),
            pa.field("kind", pa.string(), nullable=False),
            pa.field("seq", pa.int32(), nullable=False),
            pa.field("start_s", pa.float64()),
            pa.field("end_s", pa.float64()),
            pa.field("text", pa.string()),
            pa.field("attributes", pa.string()),  # JSON
            pa.field("pipeline_version", pa.string()),
            pa.field("written_at", pa.timestamp("us", tz="UTC")),
        ]
    )


class LanceSegmentSink(TableSink):
    """Table ``segments``: one row per shot, text span and speech segment, keyed by
    (video_id, kind, seq)."""

    name = "lance_segments"
    KEYS = ("video_id", "kind", "seq")

    def __init__(self, root: str | LanceTable) -> None:
        """``root``: the folder or ``s3://`` prefix of the tables, or the table itself."""
        self.table = (
            root if isinstance(root, LanceTable) else LanceTable(table_uri(root, "segments"))
        )

    @classmethod
    def from_settings(cls, storage: StorageSettings) -> LanceSegmentSink:
        return cls(LanceTable.from_settings(storage, "segments"))

    def open(self) -> None:
        self.table.create(segments_schema(), keys=self.KEYS)

    def write(self, results: Sequence[VideoResult]) -> None:
        results = latest_per_video(results)
        if results:
            video_ids = [r.ref.video_id for r in results]
            self.table.upsert(self.rows_of(results), keys=list(self.KEYS), video_ids=video_ids)

    @staticmethod
    def rows_of(results: Sequence[VideoResult]) -> pa.Table:
        written_at = datetime.now(UTC)
        rows = []
        for result in results:
            seqs: dict[str, int] = {}
            for segment in views_of(result).segments:
                kind = segment["kind"]
                seqs[kind] = seqs.get(kind, -1) + 1
                rows.append(
                    {
                        **segment,
                        "video_id": result.ref.video_id,
                        "tenant": result.ref.tenant,
                        "seq": seqs[kind],
                        "attributes": json.dumps(segment["attributes"], sort_keys=True),
                        "pipeline_version": result.pipeline_version,
                        "written_at": written_at,
                    }
                )
        return pa.Table.from_pylist(rows, schema=segments_schema())

    def segment_rows(self, video_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        """One video's segments (of one kind), in time order, attributes decoded."""
        where = f"video_id = {sql_string(video_id)}"
        if kind is not None:
            where += f" AND kind = {sql_string(kind)}"
        rows = self.table.rows(filter=where)
        for row in rows:
            row["attributes"] = json.loads(row["attributes"]) if row["attributes"] else {}
        return sorted(rows, key=lambda row: (row["start_s"], row["kind"], row["seq"]))
