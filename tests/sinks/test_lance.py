"""Lance frames and videos tables: created on first write, idempotent, stale rows removed."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from pydantic import SecretStr

from core.config import StorageSettings
from core.errors import RetryableError
from sinks.errors import SinkRejected, SinkUnavailable
from sinks.lance import LanceFrameSink, LanceSummarySink, frames_schema, videos_schema
from sinks.lance_table import LanceTable
from storage.s3 import lance_storage_options
from tests.sinks import DIM, make_result, unit_vectors


@pytest.fixture
def frames(tmp_path: Path) -> LanceFrameSink:
    return LanceFrameSink(str(tmp_path / "lance"))


@pytest.fixture
def videos(tmp_path: Path) -> LanceSummarySink:
    return LanceSummarySink(str(tmp_path / "lance"))


def test_reads_before_any_write_are_empty(frames: LanceFrameSink, videos: LanceSummarySink) -> None:
    assert frames.count_rows() == 0
    assert frames.frame_rows("nope") == []
    assert frames.table.version() is None
    assert videos.video_row("nope") is None
    assert videos.video_rows() == []


def test_first_write_creates_the_table_with_all_frames(frames: LanceFrameSink) -> None:
    result = make_result("a", frames=5)
    frames.write([result])

    rows = frames.frame_rows("a", with_embedding=True)
    assert [r["frame_index"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["timestamp_ms"] for r in rows] == [0, 500, 1000, 1500, 2000]
    first = rows[0]
    assert first["tenant"] == "default"
    assert first["ocr_text"] == "a says 0"
    assert first["ocr_lines"] == [{"text": "a says 0", "score": pytest.approx(0.9)}]
    assert first["pipeline_version"] == "v1"
    assert first["keyframe"] is True
    expected = result.frames[0].embedding
    assert expected is not None
    np.testing.assert_allclose(first["embedding"], expected, rtol=1e-6)
    schema = frames.table.schema()
    assert schema is not None
    assert schema.field("embedding").type.list_size == 384
    assert "embedding" not in frames.frame_rows("a")[0]


def test_writing_twice_leaves_the_same_rows(frames: LanceFrameSink) -> None:
    batch = [make_result("a", frames=20), make_result("b", frames=20, seed=1)]
    frames.write(batch)
    frames.write(batch)
    assert frames.count_rows() == 40
    assert frames.count_rows("a") == 20


def test_new_pipeline_version_with_fewer_frames_leaves_only_new_rows(
    frames: LanceFrameSink,
) -> None:
    frames.write([make_result("a", frames=20), make_result("b", frames=20, seed=1)])
    frames.write([make_result("a", frames=7, version="v2", step_s=1.0)])

    rows = frames.frame_rows("a")
    assert len(rows) == 7
    assert {r["pipeline_version"] for r in rows} == {"v2"}
    assert [r["timestamp_ms"] for r in rows] == [i * 1000 for i in range(7)]
    assert frames.count_rows("b") == 20  # other videos untouched


def test_a_video_without_frames_removes_its_old_rows(frames: LanceFrameSink) -> None:
    frames.write([make_result("a", frames=4), make_result("b", frames=3)])
    frames.write([make_result("a", frames=0, version="v2")])
    assert frames.count_rows("a") == 0
    assert frames.count_rows("b") == 3


def test_many_videos_in_one_write_make_one_commit(frames: LanceFrameSink) -> None:
    frames.write([make_result("seed", frames=1)])
    before = frames.table.version()
    assert before is not None
    frames.write([make_result(f"v{i}", frames=20, seed=i) for i in range(16)])
    assert frames.table.version() == before + 1
    assert frames.count_rows() == 1 + 16 * 20


def test_the_same_video_twice_in_a_batch_keeps_the_last(frames: LanceFrameSink) -> None:
    frames.write([make_result("a", frames=5), make_result("a", frames=3, version="v2")])
    rows = frames.frame_rows("a")
    assert len(rows) == 3
    assert {r["pipeline_version"] for r in rows} == {"v2"}


def test_frames_without_embedding_are_null(frames: LanceFrameSink) -> None:
    frames.write([make_result("a", frames=3, embed=False)])
    rows = frames.frame_rows("a", with_embedding=True)
    assert [r["embedding"] for r in rows] == [None, None, None]


def test_embedding_dim_comes_from_the_first_vector(tmp_path: Path) -> None:
    sink = LanceFrameSink(str(tmp_path / "lance"))
    sink.write([make_result("a", frames=2, dim=16)])
    assert sink.embedding_dim() == 16
    # Another text model's vectors (another size) are kept out; the rows are written.
    sink.write([make_result("b", frames=2, vectors=unit_vectors(2, 8))])
    assert [r["embedding"] for r in sink.frame_rows("b", with_embedding=True)] == [None, None]
    assert sink.embedding_dim() == 16
    # Vectors of two sizes in one result are a fault, and refused.
    mixed = make_result("c", frames=2, vectors=unit_vectors(2, 16))
    frames = [
        mixed.frames[0],
        dataclasses.replace(mixed.frames[1], embedding=unit_vectors(1, 8)[0]),
    ]
    with pytest.raises(SinkRejected) as caught:
        sink.write([dataclasses.replace(mixed, frames=frames)])
    assert caught.value.code == "sink_embedding_dim_mismatch"
    assert sink.count_rows("c") == 0


def test_quotes_in_video_ids_are_safe(frames: LanceFrameSink) -> None:
    tricky = "o'neil') OR (video_id = 'x"
    frames.write([make_result(tricky, frames=2), make_result("x", frames=2)])
    frames.write([make_result(tricky, frames=1, version="v2")])
    assert frames.count_rows(tricky) == 1
    assert frames.count_rows("x") == 2


def test_summary_has_one_row_per_video(videos: LanceSummarySink) -> None:
    videos.write([make_result("a", frames=4), make_result("b", frames=2, tenant="t2")])
    videos.write([make_result("a", frames=3, version="v2")])
    assert videos.count_rows() == 2
    row = videos.video_row("a")
    assert row is not None
    assert row["pipeline_version"] == "v2"
    assert row["frames"] == 3
    assert row["width"] == 1280
    assert row["text"] == "a says 0\na says 1\na says 2"
    assert row["metadata"] == {"title": "a"}
    assert row["timings"] == {"decode": 0.5, "ocr": 1.25}
    assert row["completed_at"].year == 2025
    assert [r["video_id"] for r in videos.video_rows(tenant="t2")] == ["b"]


def test_storage_options_for_s3_carry_endpoint_and_keys() -> None:
    local = StorageSettings(lance_uri="/tmp/x")
    assert lance_storage_options(local) is None
    s3 = StorageSettings(
        lance_uri="s3://bucket/prefix",
        s3_endpoint_url="http://127.0.0.1:9000",
        s3_access_key_id=SecretStr("key"),
        s3_secret_access_key=SecretStr("secret"),
    )
    options = lance_storage_options(s3)
    assert options is not None
    assert options["aws_endpoint"] == "http://127.0.0.1:9000"
    assert options["allow_http"] == "true"
    assert options["aws_access_key_id"] == "key"
    assert options["aws_secret_access_key"] == "secret"
    assert options["aws_region"] == "us-east-1"


def test_concurrent_commits_on_different_videos_all_land(tmp_path: Path) -> None:
    """Commit conflicts between writers of different videos are retried, not lost."""
    root = str(tmp_path / "lance")
    LanceFrameSink(root).write([make_result("seed", frames=1)])
    sinks = [LanceFrameSink(root) for _ in range(3)]

    def write_many(n: int) -> None:
        for j in range(4):
            sinks[n].write([make_result(f"w{n}-{j}", frames=3, seed=n * 10 + j)])

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(write_many, range(3)))
    assert sinks[0].count_rows() == 1 + 3 * 4 * 3


class OverwrittenBeforeEachCommit(LanceTable):
    """A table that another writer overwrites between this one reading it and committing: the
    commit then conflicts for real, and Lance's own conflict retries cannot resolve it (an
    Overwrite is incompatible with a merge)."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, commit_retries=5)
        self.interfere = True
        self.merges = 0  # commits this table attempted

    def _evolve(self, dataset: lance.LanceDataset, schema: pa.Schema) -> None:
        self.merges += 1
        if self.interfere:
            lance.write_dataset(dataset.to_table(), self.uri, mode="overwrite")
        super()._evolve(dataset, schema)


def test_a_commit_conflict_is_tried_once_per_write(tmp_path: Path) -> None:
    """No loop of ours around Lance's conflict retries: a conflict that outlasts them fails
    the write once, as the retryable ``sink_commit_conflict`` that the processing attempts
    retry (a loop here made it up to 36 tries per write)."""
    table = OverwrittenBeforeEachCommit(str(tmp_path / "frames.lance"))
    sink = LanceFrameSink(table)
    table.interfere = False
    sink.write([make_result("seed", frames=1)])
    table.interfere, table.merges = True, 0

    with pytest.raises(SinkUnavailable) as caught:
        sink.write([make_result("a", frames=2)])
    assert caught.value.code == "sink_commit_conflict"
    assert isinstance(caught.value, RetryableError)
    assert table.merges == 1

    table.interfere = False  # the next write starts again from the latest version
    sink.write([make_result("a", frames=2)])
    assert sink.count_rows() == 3


def test_two_writers_creating_the_table_at_once_both_land(tmp_path: Path) -> None:
    root = str(tmp_path / "lance")
    sinks = [LanceSummarySink(root) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda n: sinks[n].write([make_result(f"first-{n}", frames=1)]), range(2)))
    assert sinks[0].count_rows() == 2


def test_compaction_merges_fragments_and_drops_old_versions(tmp_path: Path) -> None:
    table = LanceTable(str(tmp_path / "frames.lance"), compact_every=4, keep_versions_s=0)
    sink = LanceFrameSink(table)
    for i in range(4):
        sink.write([make_result(f"v{i}", frames=3, seed=i)])
        sink.write([make_result(f"v{i}", frames=2, seed=i, version="v2")])  # leaves deletions
    dataset = table.open()
    assert dataset is not None
    assert len(dataset.get_fragments()) <= 2
    assert len(dataset.versions()) <= 2
    assert sink.count_rows() == 8
    assert {r["pipeline_version"] for r in sink.frame_rows("v3")} == {"v2"}


@pytest.mark.parametrize("made_before_keys_were_declared", [False, True])
def test_two_writers_inserting_the_same_new_video_leave_one_row_per_key(
    tmp_path: Path, made_before_keys_were_declared: bool
) -> None:
    """A writer whose view of the table is older than another's commit (a process frozen
    between its read and its commit, then woken) inserts the same new keys: the keys are
    declared as the table's primary key (also in a table made before they were), so the
    commits conflict and the later one retries as an update instead of adding the rows
    again. Undeclared, the video had 10 rows here."""
    if made_before_keys_were_declared:
        LanceTable(f"{tmp_path}/frames.lance").create(frames_schema(DIM))
        LanceTable(f"{tmp_path}/videos.lance").create(videos_schema())
    first, second = LanceFrameSink(str(tmp_path)), LanceFrameSink(str(tmp_path))
    first.write([make_result("warm-a", frames=2)])
    second.write([make_result("warm-b", frames=2, seed=1)])  # each holds its own version now
    first.write([make_result("twice", frames=5, seed=2)])
    second.write([make_result("twice", frames=5, seed=2)])  # from a version before that commit
    assert first.count_rows("twice") == 5
    assert first.count_rows() == 9
    summary_a, summary_b = LanceSummarySink(str(tmp_path)), LanceSummarySink(str(tmp_path))
    summary_a.write([make_result("warm-a", frames=2)])
    summary_b.write([make_result("warm-b", frames=2)])
    summary_a.write([make_result("twice", frames=5)])
    summary_b.write([make_result("twice", frames=5)])
    assert summary_a.count_rows() == 3


def test_a_frames_table_from_before_extras_gets_the_column_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    """What stages from other packages find in a frame is stored as JSON in ``extras``; a
    table written before the column existed gains it (null in its old rows) at the next
    write."""
    table = LanceTable(str(tmp_path / "frames.lance"))
    old = pa.schema([field for field in frames_schema(DIM) if field.name != "extras"])
    table.create(old, keys=LanceFrameSink.KEYS)
    lance.write_dataset(
        LanceFrameSink.rows_of([make_result("old", frames=2)], DIM).drop_columns(["extras"]),
        table.uri,
        mode="append",
    )
    sink = LanceFrameSink(table)
    found = make_result("new", frames=2)
    found.frames[1].extras["colour"] = "blue"
    sink.write([found])

    assert [row["extras"] for row in sink.frame_rows("old")] == [None, None]
    assert [row["extras"] for row in sink.frame_rows("new")] == [None, '{"colour": "blue"}']
