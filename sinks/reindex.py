"""A text model's search table filled from the stored segments: nothing is decoded or
analysed again, only the segments' text is embedded.

The search answers from the table of the configured text model (``sinks.search``). After a
change of model, videos processed before it are in the old model's table only; ``reelsense
reindex`` reads their segments from the ``segments`` table and writes them to the new one,
a batch of videos per commit. Videos the new table already has are skipped: the service wrote
them under the new model, and their rows are as new as the segments or newer.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sinks.lance_rows import video_predicate
from sinks.search import LanceSearchIndex
from sinks.search_rows import search_rows
from sinks.segments import LanceSegmentSink
from sinks.views import Shot

_COLUMNS = ["video_id", "tenant", "kind", "seq", "start_s", "end_s", "text", "attributes"]


@dataclass(frozen=True)
class Reindexed:
    table: str
    videos: int  # written to the table
    skipped: int  # already there
    rows: int
    seconds: float


def reindex(
    index: LanceSearchIndex, segments: LanceSegmentSink, *, batch_videos: int = 256
) -> Reindexed:
    started = time.monotonic()
    video_ids = sorted({row["video_id"] for row in segments.table.rows(columns=["video_id"])})
    written = skipped = rows = 0
    for start in range(0, len(video_ids), batch_videos):
        batch = video_ids[start : start + batch_videos]
        present = index.table.rows(filter=video_predicate(batch), columns=["video_id"])
        have = {row["video_id"] for row in present}
        skipped += len(have)
        todo = [video_id for video_id in batch if video_id not in have]
        if not todo:
            continue
        stored = segments.table.rows(
            filter=video_predicate(todo), columns=[*_COLUMNS, "pipeline_version"]
        )
        new = _rows(stored)
        if new:
            index.table.upsert(
                index.table_of(index.embedded(new)), keys=list(index.KEYS), video_ids=todo
            )
        written, rows = written + len(todo), rows + len(new)
    index.upkeep.ask()
    return Reindexed(index.table.name, written, skipped, rows, round(time.monotonic() - started, 2))


def _rows(stored: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    by_video: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in stored:
        by_video[row["video_id"]].append(row)
    written_at = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    for video_id, its in by_video.items():
        its.sort(key=lambda row: (row["start_s"], row["kind"], row["seq"]))
        shots: list[Shot] = [
            (row["start_s"], row["end_s"], json.loads(row["attributes"] or "{}").get("thumbnail"))
            for row in sorted(its, key=lambda row: row["seq"])
            if row["kind"] == "shot"
        ]
        first = its[0]
        rows += search_rows(
            video_id, first["tenant"], first["pipeline_version"], its, shots,
            partial=False, written_at=written_at,
        )  # fmt: skip
    return rows
