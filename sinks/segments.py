"""Lance table ``segments``: what a video shows and says over time, one row per segment.

Kinds: ``shot`` (``core.shots``; attributes: how it begins, its keyframe and thumbnail key),
``text`` (on-screen text spans, ``core.spans``; attributes: box, score, samples) and
``speech`` (transcript segments, ``core.speech``; attributes: language, confidence, words)
and ``description`` (the VLM's description of a shot, ``core.description``: text is its
caption, attributes the whole description). Rows are
keyed by (video_id, kind, seq), seq counting the segments of one kind in time order, and
written by the same video-keyed upsert as the other tables, so a video re-processed ends up
with exactly its new segments. Query it with any Lance or Arrow tool, e.g. every shot longer
than ten seconds, or every text shown for more than five.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from core.config import StorageSettings
from core.records import VideoResult
from core.spans import text_spans
from sinks.base import TableSink
from sinks.lance_rows import latest_per_video, sql_string, table_uri
from sinks.lance_table import LanceTable
from sinks.object_store import shot_entries


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


def segments_of(result: VideoResult) -> list[dict[str, Any]]:
    """The segments of one result as ``kind, start_s, end_s, text, attributes`` rows."""
    rows: list[dict[str, Any]] = []
    shots = shot_entries(result)
    for shot in shots:
        attributes = {k: shot[k] for k in ("entered_by", "transition_s", "keyframe", "thumbnail")}
        rows.append(_row("shot", shot["start_s"], shot["end_s"], "", attributes))
    for shot in shots:
        if (description := shot["description"]) is not None:
            text = str(description.get("caption", ""))
            rows.append(_row("description", shot["start_s"], shot["end_s"], text, description))
    for span in text_spans(result.frames):
        box = [[float(x), float(y)] for x, y in span.box]
        attributes = {"box": box, "score": round(span.score, 4), "samples": span.frames}
        rows.append(_row("text", span.start_s, span.end_s, span.text, attributes))
    speech = result.speech
    language = speech.language if speech is not None else None
    for segment in speech.segments if speech is not None else ():
        attributes = {
            "language": language,
            "avg_logprob": round(segment.avg_logprob, 4),
            "no_speech_prob": round(segment.no_speech_prob, 4),
            "words": [word.to_json() for word in segment.words],
        }
        rows.append(_row("speech", segment.start_s, segment.end_s, segment.text, attributes))
    return rows


def _row(kind: str, start: float, end: float, text: str, attributes: Any) -> dict[str, Any]:
    return {"kind": kind, "start_s": start, "end_s": end, "text": text, "attributes": attributes}


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
            for segment in segments_of(result):
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
