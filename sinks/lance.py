"""Lance tables of results: ``frames`` (one row per sampled frame) and ``videos`` (one per video).

Both tables live under ``StorageSettings.lance_uri`` (a folder or ``s3://bucket/prefix``) and are
written by upserts keyed by the video, so a write is idempotent and a video re-processed under a
new pipeline version ends up with exactly its new rows. Only one writer per table should run
(see ``sinks.writer``): two writers inserting the same new key both succeed and duplicate rows.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import lance
import numpy as np
import pyarrow as pa
from lance.commit import CommitConflictError

from core.config import StorageSettings
from core.errors import ReelsenseError
from sinks.base import Sink, VideoResult
from sinks.errors import SinkRejected, SinkUnavailable
from sinks.object_store import lance_storage_options

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_DIM = 384
# Fragments of this many rows keep scans parallel; one huge fragment is scanned by one thread.
FRAGMENT_ROWS = 64 * 1024

# Substrings of Lance/object_store messages that retrying cannot fix.
_REJECTED_MARKERS = (
    *("Invalid user input", "Ambiguous merge", "Schema error", "schema mismatch"),
    *("NoSuchBucket", "AccessDenied", "Access Denied", "InvalidAccessKeyId"),
    *("SignatureDoesNotMatch", "403 Forbidden"),
)
_CONFLICT_MARKERS = ("Commit conflict", "commit conflict", "Incompatible transaction")
# Creating a table is not atomic in pylance 14 (see LanceTable.create): creations in this
# process take turns. Across processes, the single writer per table prevents the race.
_CREATE_LOCK = threading.Lock()


def table_uri(root: str, table: str) -> str:
    """The dataset URI of ``table`` under ``root`` (a folder or an ``s3://`` prefix)."""
    return f"{root.rstrip('/')}/{table}.lance"


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal for Lance filters."""
    return "'" + value.replace("'", "''") + "'"


def video_predicate(video_ids: Iterable[str]) -> str:
    return f"video_id IN ({', '.join(sql_string(v) for v in video_ids)})"


def map_lance_error(exc: BaseException, *, table: str) -> ReelsenseError:
    """Lance raises OSError/ValueError/RuntimeError with the Rust error in the text."""
    if isinstance(exc, ReelsenseError):
        return exc
    text = str(exc)
    if isinstance(exc, CommitConflictError) or any(m in text for m in _CONFLICT_MARKERS):
        return SinkUnavailable(f"{table}: commit conflict: {text}", code="sink_commit_conflict")
    if any(marker in text for marker in _REJECTED_MARKERS):
        return SinkRejected(f"{table}: {text}")
    return SinkUnavailable(f"{table}: {type(exc).__name__}: {text}")


def latest_per_video(results: Sequence[VideoResult]) -> list[VideoResult]:
    """One result per video_id (the last submitted wins), in first-seen order."""
    by_id: dict[str, VideoResult] = {}
    for result in results:
        by_id[result.ref.video_id] = result
    return list(by_id.values())


def embedding_array(vectors: Sequence[Any], dim: int) -> pa.FixedSizeListArray:
    """A nullable fixed_size_list<float32>[dim] column; None entries become nulls."""
    values = np.zeros((len(vectors), dim), dtype=np.float32)
    mask = np.zeros(len(vectors), dtype=bool)
    for row, vector in enumerate(vectors):
        if vector is None:
            mask[row] = True
            continue
        flat = np.asarray(vector, dtype=np.float32).ravel()
        if flat.shape[0] != dim:
            raise SinkRejected(
                f"embedding has {flat.shape[0]} dimensions, the table has {dim}",
                code="sink_embedding_dim_mismatch",
            )
        values[row] = flat
    return pa.FixedSizeListArray.from_arrays(
        pa.array(values.ravel()), dim, mask=pa.array(mask) if mask.any() else None
    )


def columns_table(columns: dict[str, list[Any]], schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` from column lists; ``embedding`` is built as a vector column."""
    arrays = [
        embedding_array(columns[f.name], f.type.list_size)
        if f.name == "embedding"
        else pa.array(columns[f.name], type=f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def first_dim(results: Sequence[VideoResult]) -> int | None:
    for result in results:
        for frame in result.frames:
            if frame.embedding is not None:
                return int(np.asarray(frame.embedding).size)
    return None


class LanceTable:
    """One Lance dataset that may not exist yet, written by upserts keyed by video.

    Not thread-safe for writes: exactly one writer thread uses it (``SinkWriter``).
    Reads open the latest version each time so they see other processes' commits.
    """

    def __init__(
        self,
        uri: str,
        *,
        storage_options: dict[str, str] | None = None,
        commit_retries: int = 5,
        compact_every: int = 64,
        keep_versions_s: float = 3600.0,
    ) -> None:
        self.uri = uri
        self.name = uri.rstrip("/").rsplit("/", 1)[-1].removesuffix(".lance")
        self.storage_options = storage_options
        self.commit_retries = commit_retries
        self.compact_every = compact_every
        self.keep_versions_s = keep_versions_s
        self._dataset: lance.LanceDataset | None = None
        self._commits = 0

    @classmethod
    def from_settings(cls, storage: StorageSettings, table: str) -> LanceTable:
        return cls(
            table_uri(storage.lance_uri, table),
            storage_options=lance_storage_options(storage),
            commit_retries=storage.commit_retries,
            compact_every=storage.lance_compact_every,
            keep_versions_s=storage.lance_keep_versions_s,
        )

    def open(self) -> lance.LanceDataset | None:
        """The latest version of the dataset, or None if it was never written."""
        try:
            return lance.dataset(self.uri, storage_options=self.storage_options)
        except ValueError as exc:
            if "not found" in str(exc) and "LanceError(IO)" not in str(exc):
                return None
            raise map_lance_error(exc, table=self.name) from exc
        except Exception as exc:
            raise map_lance_error(exc, table=self.name) from exc

    def version(self) -> int | None:
        dataset = self.open()
        return None if dataset is None else dataset.version

    def schema(self) -> pa.Schema | None:
        dataset = self._dataset or self.open()
        return None if dataset is None else dataset.schema

    def embedding_dim(self, configured: int | None, results: Sequence[VideoResult]) -> int:
        """The table's dimension if it exists, else the configured one, else the first vector's."""
        schema = self.schema()
        if schema is not None and schema.get_field_index("embedding") >= 0:
            return int(schema.field("embedding").type.list_size)
        return configured or first_dim(results) or DEFAULT_EMBEDDING_DIM

    def upsert(self, rows: pa.Table, *, keys: list[str], video_ids: Sequence[str]) -> None:
        """Make the rows of ``video_ids`` exactly ``rows``: update, insert, delete the rest."""
        if not video_ids:
            return
        attempt = 0
        while True:
            try:
                self._upsert_once(rows, keys=keys, video_ids=video_ids)
                break
            except Exception as exc:
                error = map_lance_error(exc, table=self.name)
                self._dataset = None  # reopen at the latest version next time
                if error.code != "sink_commit_conflict" or attempt >= self.commit_retries:
                    raise error from exc
                attempt += 1
                time.sleep(min(1.0, 0.05 * 2**attempt))
        self._commits += 1
        if self.compact_every and self._commits % self.compact_every == 0:
            self.compact()

    def compact(self) -> None:
        """Merge small fragments (one per commit) and drop versions older than the retention.

        Every commit adds a fragment, a manifest and deletion files; left alone, scans slow
        down and storage grows. Failures cost only speed and space, so they are logged.
        """
        dataset = self.open()
        if dataset is None:
            return
        try:
            dataset.optimize.compact_files(
                target_rows_per_fragment=FRAGMENT_ROWS, materialize_deletions_threshold=0.1
            )
            dataset.cleanup_old_versions(older_than=timedelta(seconds=self.keep_versions_s))
        except Exception as exc:
            error = map_lance_error(exc, table=self.name)
            log.warning("compacting %s failed: %s", self.name, error)
        self._dataset = None

    def _upsert_once(self, rows: pa.Table, *, keys: list[str], video_ids: Sequence[str]) -> None:
        dataset = self._dataset or self.open()
        if dataset is None:
            if rows.num_rows == 0:
                return  # nothing to insert and nothing to delete
            dataset = self.create(rows.schema)
        self._evolve(dataset, rows.schema)
        rows = rows.select([n for n in dataset.schema.names if n in rows.schema.names])
        (
            dataset.merge_insert(keys)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(video_predicate(video_ids))
            .conflict_retries(self.commit_retries)
            .execute(rows)
        )
        self._dataset = dataset  # merge_insert moved this handle to the new version

    def create(self, schema: pa.Schema) -> lance.LanceDataset:
        """The dataset, created empty with ``schema`` if missing.

        Measured with pylance 14: a creation commits as an Overwrite, so two concurrent
        creations with rows can both succeed with one's rows lost (8 of 20 tries). Creating
        empty tables under a lock, then merging (a commit checked for conflicts), avoids it.
        """
        with _CREATE_LOCK:
            dataset = self.open()
            if dataset is not None:
                return dataset
            try:
                lance.write_dataset(
                    schema.empty_table(), self.uri, schema=schema, mode="create",
                    storage_options=self.storage_options,
                )  # fmt: skip
            except OSError as exc:
                if "already exists" not in str(exc):
                    raise map_lance_error(exc, table=self.name) from exc
            dataset = self.open()
        if dataset is None:
            raise SinkUnavailable(f"{self.name}: created but not found at {self.uri}")
        return dataset

    def _evolve(self, dataset: lance.LanceDataset, schema: pa.Schema) -> None:
        """Columns added to the code since the table was created are added as nullable."""
        existing = dataset.schema
        missing = [field for field in schema if existing.get_field_index(field.name) < 0]
        if missing:
            dataset.add_columns([field.with_nullable(True) for field in missing])
        for field in schema:
            have = dataset.schema.field(field.name)
            if have.type != field.type:
                raise SinkRejected(
                    f"{self.name}.{field.name} is {have.type} in the table, "
                    f"{field.type} in the rows",
                    code="sink_schema_mismatch",
                )

    def rows(
        self,
        *,
        filter: str | None = None,
        columns: list[str] | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        dataset = self.open()
        if dataset is None:
            return []
        try:
            table = dataset.to_table(columns=columns, filter=filter, limit=limit)
        except Exception as exc:
            raise map_lance_error(exc, table=self.name) from exc
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows

    def count_rows(self, filter: str | None = None) -> int:
        dataset = self.open()
        if dataset is None:
            return 0
        try:
            return int(dataset.count_rows(filter=filter))
        except Exception as exc:
            raise map_lance_error(exc, table=self.name) from exc


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
            pa.field("embedding", pa.list_(pa.float32(), dim)),
            pa.field("pipeline_version", pa.string()),
            pa.field("written_at", pa.timestamp("us", tz="UTC")),
        ]
    )


class LanceFrameSink(Sink):
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

    def open(self) -> None:
        """Create the table now if its embedding dimension is known already."""
        if self._dim is not None:
            self.table.create(frames_schema(self._dim))

    def embedding_dim(self, results: Sequence[VideoResult] = ()) -> int:
        return self.table.embedding_dim(self._dim, results)

    def write(self, results: Sequence[VideoResult]) -> None:
        results = latest_per_video(results)
        if not results:
            return
        dim = self.embedding_dim(results)
        rows = self.rows_of(results, dim)
        self.table.upsert(rows, keys=list(self.KEYS), video_ids=[r.ref.video_id for r in results])

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


class LanceSummarySink(Sink):
    """Table ``videos``: one row per video, keyed by video_id."""

    name = "lance_videos"

    def __init__(self, root: str | LanceTable) -> None:
        """``root``: the folder or ``s3://`` prefix of the tables, or the table itself."""
        self.table = root if isinstance(root, LanceTable) else LanceTable(table_uri(root, "videos"))

    @classmethod
    def from_settings(cls, storage: StorageSettings) -> LanceSummarySink:
        return cls(LanceTable.from_settings(storage, "videos"))

    def open(self) -> None:
        self.table.create(videos_schema())

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
