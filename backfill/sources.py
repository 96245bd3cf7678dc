"""What a backfill goes over: a manifest, a folder or object-store prefix, or the videos the
service has already processed (the ``videos`` table).

Each source yields ``BackfillItem`` for what it can send and ``Skipped`` (with where and why)
for what it cannot: a bad manifest line costs that line, not the run. Ids are stable, so a
backfill run twice sends the same events and the service skips what is already done.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.parquet as pq
from pydantic import ValidationError

from consumers.events import VideoUploaded
from core.config import StorageSettings
from sinks.lance import LanceSummarySink
from sinks.lance_rows import sql_string
from storage.uri import object_store_from_uri

VIDEO_SUFFIXES = frozenset({".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".ts", ".flv"})


@dataclass(frozen=True)
class BackfillItem:
    """One video to send."""

    event: VideoUploaded
    where: str  # the manifest line, file or table row it came from


@dataclass(frozen=True)
class Skipped:
    """One entry of a source that is not a video to send, and why."""

    where: str
    reason: str


@dataclass(frozen=True)
class Selection:
    """Which finished videos of the ``videos`` table to send again."""

    tenant: str | None = None
    not_version: str | None = None  # those processed by another pipeline version
    since: datetime | None = None  # completed at or after
    until: datetime | None = None  # completed before


def _item(fields: dict[str, Any], where: str) -> BackfillItem | Skipped:
    video_id = fields.get("video_id", fields.get("id"))
    values = {
        "video_id": video_id,
        "uri": fields.get("uri"),
        "tenant": fields.get("tenant") or "default",
        "metadata": fields.get("metadata") or {},
    }
    if isinstance(values["metadata"], str):  # Parquet columns often carry JSON text
        try:
            values["metadata"] = json.loads(values["metadata"])
        except ValueError:
            return Skipped(where, "metadata is not JSON")
    try:
        return BackfillItem(VideoUploaded.model_validate(values), where)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return Skipped(where, problems)


def from_manifest(path: Path) -> Iterator[BackfillItem | Skipped]:
    """JSONL (one object per line: ``id`` or ``video_id``, ``uri``, ``tenant``, ``metadata``)
    or Parquet with those columns."""
    if path.suffix == ".parquet":
        for number, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield _item(row, f"{path.name} row {number}")
        return
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path.name}:{number}"
            try:
                fields = json.loads(line)
            except ValueError as exc:
                yield Skipped(where, f"not JSON: {exc}")
                continue
            if not isinstance(fields, dict):
                yield Skipped(where, "not a JSON object")
                continue
            yield _item(fields, where)


def video_id_of(relative: str) -> str:
    """A stable id for a file under a prefix: its path without the suffix, as one id."""
    stem = str(PurePosixPath(relative).with_suffix(""))
    return (re.sub(r"[^A-Za-z0-9._:-]+", "_", stem).strip("._:-") or "video")[:128]


def from_prefix(
    prefix: str, storage: StorageSettings, *, tenant: str = "default"
) -> Iterator[BackfillItem | Skipped]:
    """Every video file under a local folder or an object-store prefix (``s3://bucket/path``),
    by suffix (``VIDEO_SUFFIXES``)."""
    if "://" not in prefix or prefix.startswith("file://"):
        root = Path(prefix.removeprefix("file://")).resolve()
        if not root.is_dir():
            yield Skipped(prefix, "not a folder")
            return
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES:
                fields = {"video_id": video_id_of(path.relative_to(root).as_posix())}
                yield _item({**fields, "uri": path.as_uri(), "tenant": tenant}, str(path))
        return
    store = object_store_from_uri(prefix, storage)
    try:
        for key in sorted(store.list()):
            if PurePosixPath(key).suffix.lower() in VIDEO_SUFFIXES:
                fields = {"video_id": video_id_of(key), "uri": store.uri(key), "tenant": tenant}
                yield _item(fields, store.uri(key))
    finally:
        store.close()


def from_videos_table(
    storage: StorageSettings, selection: Selection
) -> Iterator[BackfillItem | Skipped]:
    """The videos the service has processed, as ``selection`` narrows them."""
    clauses = []
    if selection.tenant is not None:
        clauses.append(f"tenant = {sql_string(selection.tenant)}")
    if selection.not_version is not None:
        clauses.append(f"pipeline_version != {sql_string(selection.not_version)}")
    if selection.since is not None:
        clauses.append(f"completed_at >= timestamp '{selection.since.isoformat()}'")
    if selection.until is not None:
        clauses.append(f"completed_at < timestamp '{selection.until.isoformat()}'")
    table = LanceSummarySink.from_settings(storage).table
    columns = ["video_id", "uri", "tenant", "metadata"]
    rows = table.rows(filter=" AND ".join(clauses) or None, columns=columns)
    for row in sorted(rows, key=lambda r: str(r["video_id"])):
        if not row.get("uri"):
            yield Skipped(f"videos/{row['video_id']}", "its source is not recorded")
            continue
        yield _item(row, f"videos/{row['video_id']}")
