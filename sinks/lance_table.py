"""A Lance table written by keyed upserts, and its errors (the names, filters and Arrow rows
its tables share: ``sinks.lance_rows``; the sinks whose rows live in one: ``sinks.table_sinks``).

Upserts are keyed by the video, so a write is idempotent and a video re-processed under a new
pipeline version ends up with exactly its new rows. The key columns are declared as the table's
primary key, so writers that race to insert the same new key conflict instead of both inserting
it; one writer per table (``sinks.writer``) still keeps such conflicts rare.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import lance
import pyarrow as pa
from lance.commit import CommitConflictError

from core.config import StorageSettings
from core.errors import ReelsenseError
from core.records import VideoResult
from sinks.errors import SinkAccessDenied, SinkRejected, SinkUnavailable
from sinks.lance_purge import PurgeSchedule, run_due
from sinks.lance_rows import first_dim, table_uri, video_predicate
from storage.s3 import lance_storage_options

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_DIM = 384
# Fragments of this many rows keep scans parallel; one huge fragment is scanned by one thread.
FRAGMENT_ROWS = 64 * 1024

# Substrings of Lance/object_store messages that retrying cannot fix.
_REJECTED_MARKERS = (
    *("Invalid user input", "Ambiguous merge", "Schema error", "schema mismatch"),
    "NoSuchBucket",
)
# The service's credentials refused: an outage of its own access, retried (keys rotate).
_ACCESS_MARKERS = (
    *("AccessDenied", "Access Denied", "InvalidAccessKeyId", "SignatureDoesNotMatch"),
    *("403 Forbidden", "ExpiredToken"),
)
# Field metadata that makes columns the table's primary key (see LanceTable._declare_keys).
_PRIMARY_KEY = b"lance-schema:unenforced-primary-key"
# "preempted": a compaction and an index refresh committing at once (one of them gives way).
_CONFLICT_MARKERS = (
    "Commit conflict",
    "commit conflict",
    "Incompatible transaction",
    "preempted by concurrent transaction",
)
# A table with this many fragments is compacted before ``compact_every`` commits, though not
# sooner than an eighth of them after the last compaction: a table written seldom (the videos
# table: one commit per batch of finished videos) would otherwise sit at up to ``compact_every``
# fragments, and a point read paid 3-4x (bench.perf.lance_upkeep: 41-48 ms p95 at 62 fragments,
# 11-14 just after a compaction).
COMPACT_FRAGMENTS = 16
# Creating a table is not atomic in pylance 14 (see LanceTable.create): creations in this
# process take turns. Across processes, the single writer per table prevents the race.
_CREATE_LOCK = threading.Lock()


def map_lance_error(exc: BaseException, *, table: str) -> ReelsenseError:
    """Lance raises OSError/ValueError/RuntimeError with the Rust error in the text."""
    if isinstance(exc, ReelsenseError):
        return exc
    text = str(exc)
    if isinstance(exc, CommitConflictError) or any(m in text for m in _CONFLICT_MARKERS):
        return SinkUnavailable(f"{table}: commit conflict: {text}", code="sink_commit_conflict")
    if any(marker in text for marker in _REJECTED_MARKERS):
        return SinkRejected(f"{table}: {text}")
    if any(marker in text for marker in _ACCESS_MARKERS):
        return SinkAccessDenied(f"{table}: {text}", retry_after=5.0)
    return SinkUnavailable(f"{table}: {type(exc).__name__}: {text}")


def _declared(schema: pa.Schema, keys: Sequence[str]) -> bool:
    return all((schema.field(key).metadata or {}).get(_PRIMARY_KEY) == b"true" for key in keys)


def _with_primary_key(schema: pa.Schema, keys: Sequence[str]) -> pa.Schema:
    for key in keys:
        index = schema.get_field_index(key)
        field = schema.field(index)
        schema = schema.set(
            index, field.with_metadata({**(field.metadata or {}), _PRIMARY_KEY: b"true"})
        )
    return schema


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
        keep_versions_s: float = 600.0,
        deletion_max_s: float = 86_400.0,
    ) -> None:
        self.uri = uri
        self.name = uri.rstrip("/").rsplit("/", 1)[-1].removesuffix(".lance")
        self.storage_options = storage_options
        self.commit_retries = commit_retries
        self.compact_every = compact_every
        self.keep_versions_s = keep_versions_s
        self._dataset: lance.LanceDataset | None = None
        self._commits = 0
        self._compacted_at = 0  # the commit count at the last compaction
        self.purges = PurgeSchedule(deletion_max_s, keep_versions_s)

    @classmethod
    def from_settings(cls, storage: StorageSettings, table: str) -> LanceTable:
        return cls(
            table_uri(storage.lance_uri, table),
            storage_options=lance_storage_options(storage),
            commit_retries=storage.commit_retries,
            compact_every=storage.lance_compact_every,
            keep_versions_s=storage.lance_keep_versions_s,
            deletion_max_s=storage.deletion_max_s,
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
        """Make the rows of ``video_ids`` exactly ``rows``: update, insert, delete the rest.

        Lance retries a commit conflict itself (``commit_retries`` times); one that outlasts
        those is raised as the retryable ``sink_commit_conflict``, for the caller's retries.
        """
        if video_ids:
            delete = video_predicate(video_ids)
            self._committed(lambda: self._merge_once(rows, keys=keys, delete=delete))

    def merge(self, rows: pa.Table, *, keys: list[str]) -> None:
        """Update the rows whose keys are in ``rows``, insert the others; remove nothing."""
        if rows.num_rows:
            self._committed(lambda: self._merge_once(rows, keys=keys, delete=None))

    def delete(self, predicate: str) -> None:
        """Remove the rows matching ``predicate`` (a Lance filter)."""
        dataset = self._dataset or self.open()
        if dataset is not None:
            self._committed(lambda: dataset.delete(predicate))

    def forget(self, video_ids: Sequence[str]) -> None:
        """Remove every row of ``video_ids`` (a deletion), their bytes purged from disk too
        within ``deletion_max_s`` (``purge``, ``sinks.lance_purge``)."""
        if video_ids:
            self.delete(video_predicate(video_ids))
            self.purges.forgot()

    def purge(self) -> float | None:
        """The purge or removal of old versions that is due, if one is (``run_due``); seconds
        until the next, None when none is scheduled."""
        due = self.purges.next_in()
        if due is None or due > 0:
            return due
        run_due(self.purges, self.open(), self.keep_versions_s, name=self.name)
        self._dataset = None
        return self.purges.next_in()

    def _committed(self, commit: Callable[[], object]) -> None:
        try:
            commit()
        except Exception as exc:
            self._dataset = None  # reopen at the latest version next time
            raise map_lance_error(exc, table=self.name) from exc
        self._commits += 1
        if self.compact_every and self._compaction_due():
            self.compact()

    def _compaction_due(self) -> bool:
        since = self._commits - self._compacted_at
        if since >= self.compact_every:
            return True
        if since < max(1, self.compact_every // 8) or self._dataset is None:
            return False
        return len(self._dataset.get_fragments()) >= COMPACT_FRAGMENTS

    def compact(self) -> None:
        """Merge small fragments (one per commit) and drop versions older than the retention.

        Every commit adds a fragment, a manifest and deletion files; left alone, scans slow
        down and storage grows. A compaction preempted by an index refresh committing at the
        same moment is tried once more; the old versions go even when it failed. Failures
        cost only speed and space, so they are logged.
        """
        dataset = self.open()
        if dataset is None:
            return
        self._compacted_at = self._commits
        for attempt in (1, 2):
            try:
                dataset.optimize.compact_files(
                    target_rows_per_fragment=FRAGMENT_ROWS, materialize_deletions_threshold=0.1
                )
                break
            except Exception as exc:
                error = map_lance_error(exc, table=self.name)
                if attempt == 1 and error.code == "sink_commit_conflict":
                    dataset = self.open() or dataset  # the version that preempted it
                    continue
                log.warning("compacting %s failed: %s", self.name, error)
        try:
            dataset.cleanup_old_versions(older_than=timedelta(seconds=self.keep_versions_s))
        except Exception as exc:
            error = map_lance_error(exc, table=self.name)
            log.warning("removing old versions of %s failed: %s", self.name, error)
        self._dataset = None

    def _merge_once(self, rows: pa.Table, *, keys: list[str], delete: str | None) -> None:
        dataset = self._dataset or self.open()
        if dataset is None:
            if rows.num_rows == 0:
                return  # nothing to insert and nothing to delete
            dataset = self.create(rows.schema, keys=keys)
        self._evolve(dataset, rows.schema)
        dataset = self._declare_keys(dataset, keys)
        rows = rows.select([n for n in dataset.schema.names if n in rows.schema.names])
        merge = dataset.merge_insert(keys).when_matched_update_all().when_not_matched_insert_all()
        if delete is not None:
            merge = merge.when_not_matched_by_source_delete(delete)
        merge.conflict_retries(self.commit_retries).execute(rows)
        self._dataset = dataset  # merge_insert moved this handle to the new version

    def create(self, schema: pa.Schema, *, keys: Sequence[str] = ()) -> lance.LanceDataset:
        """The dataset, created empty with ``schema`` if missing, ``keys`` declared as its
        primary key (see ``_declare_keys``).

        Measured with pylance 14: a creation commits as an Overwrite, so two concurrent
        creations with rows can both succeed with one's rows lost (8 of 20 tries). Creating
        empty tables under a lock, then merging (a commit checked for conflicts), avoids it.
        """
        with _CREATE_LOCK:
            dataset = self.open()
            if dataset is not None:
                return dataset
            schema = _with_primary_key(schema, keys)
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

    def _declare_keys(self, dataset: lance.LanceDataset, keys: list[str]) -> lance.LanceDataset:
        """The dataset with its key columns declared as its (unenforced) primary key.

        Declared, Lance checks the keys a merge inserts against those a concurrent commit
        inserted: two writers inserting the same new key conflict, and the later one retries
        as an update. Undeclared, both commits touch only fragments of their own, and both
        succeed with the key twice. Measured with pylance 14: a service process frozen
        between its read of the table and its commit, then woken, doubled a video's rows in
        the crash soak; with the keys declared, the same race leaves one row per key.
        """
        if _declared(dataset.schema, keys):
            return dataset
        try:
            dataset.update_field_metadata({key: {_PRIMARY_KEY.decode(): "true"} for key in keys})
        except Exception:
            latest = self.open()
            if latest is None or not _declared(latest.schema, keys):
                raise  # not another writer declaring them at the same moment
        return self.open() or dataset

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
