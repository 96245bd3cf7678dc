"""The rows of the search table: one per searchable segment, keyed by its content.

A row's key (``segment``) is ``kind:start_ms:crc`` of its text, ``#n`` added for a repeat: the
same segment gets the same key whether it is written with its chunk or with its video, and a
span that grows from one chunk to the whole video keeps its key (it starts where it started).
The shot is the one at the segment's middle, named only where it has a thumbnail to show.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from core.records import VideoResult
from core.search import SEARCHED_KINDS
from core.terms import index_terms
from sinks.views import Shot, shot_at, views_of


def result_rows(
    result: VideoResult, written_at: datetime, *, partial: bool
) -> list[dict[str, Any]]:
    """The rows of a result; a part of a video (``partial``) does not know its shots."""
    views = views_of(result)
    shots = () if partial else views.shot_times
    ref = result.ref
    return search_rows(
        ref.video_id, ref.tenant, result.pipeline_version, views.segments, shots,
        partial=partial, written_at=written_at,
    )  # fmt: skip


def search_rows(
    video_id: str,
    tenant: str,
    version: str,
    segments: Iterable[dict[str, Any]],
    shots: Sequence[Shot],
    *,
    partial: bool,
    written_at: datetime,
) -> list[dict[str, Any]]:
    """Rows (no embedding yet) of one video's ``segments`` (``kind, start_s, end_s, text``)."""
    rows: list[dict[str, Any]] = []
    keys: set[str] = set()
    for segment in segments:
        kind, text = segment["kind"], str(segment["text"]).strip()
        if not (kind in SEARCHED_KINDS or segment.get("searchable")) or not text:
            continue
        start, end = float(segment["start_s"]), float(segment["end_s"])
        rows.append(
            {
                "video_id": video_id,
                "tenant": tenant,
                "kind": kind,
                "segment": segment_key(kind, start, text, keys),
                "start_s": start,
                "end_s": end,
                "text": text,
                "terms": index_terms(text),
                "shot": shot_at((start + end) / 2, shots),
                "partial": partial,
                "pipeline_version": version,
                "written_at": written_at,
            }
        )
    return rows


def segment_key(kind: str, start_s: float, text: str, taken: set[str]) -> str:
    key = f"{kind}:{round(start_s * 1000)}:{zlib.crc32(text.encode()):08x}"
    unique, repeat = key, 1
    while unique in taken:
        unique, repeat = f"{key}#{repeat}", repeat + 1
    taken.add(unique)
    return unique
