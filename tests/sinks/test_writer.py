"""The one writer: batches videos into one commit per sink and reports failures per video."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from core.config import StorageSettings
from core.records import VideoResult
from devkit.services import free_port
from models.embedding import E5Embedder
from sinks.errors import SinkRejected, SinkUnavailable
from sinks.fingerprints import LanceFingerprintSink
from sinks.lance import LanceFrameSink, LanceSummarySink
from sinks.lineup import sinks_from_settings
from sinks.object_store import ResultDocumentSink
from sinks.search import LanceSearchIndex
from sinks.segments import LanceSegmentSink
from sinks.writer import SinkWriter
from storage.s3 import s3_client
from storage.uri import object_store_from_uri
from tests.sinks import make_result, unit_vectors


def local_settings(tmp_path: Path, **extra: Any) -> StorageSettings:
    return StorageSettings(
        lance_uri=str(tmp_path / "lance"), object_store_uri=str(tmp_path / "objects"), **extra
    )


def test_sinks_from_settings_builds_every_sink(tmp_path: Path) -> None:
    sinks = sinks_from_settings(local_settings(tmp_path), embedding_dim=16)
    assert [type(s) for s in sinks] == [
        LanceFrameSink,
        ResultDocumentSink,
        LanceSegmentSink,
        LanceFingerprintSink,
        LanceSummarySink,
    ]
    searched = sinks_from_settings(local_settings(tmp_path), text_model=E5Embedder())
    assert [type(s) for s in searched][3:] == [
        LanceSearchIndex,
        LanceFingerprintSink,
        LanceSummarySink,
    ]


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_parts_are_written_at_once_and_never_after_their_final_write(tmp_path: Path) -> None:
    index = LanceSearchIndex(str(tmp_path / "lance"), E5Embedder())
    # A batch waits 30 s for company; a part does not wait at all.
    writer = SinkWriter([index], batch_videos=8, flush_s=30.0)
    try:
        made = make_result("long", frames=2, texts=["NIGHT MARKET"] * 2, embed=False)
        part = dataclasses.replace(made, epoch=3, completed_at=datetime.now(UTC))
        writer.submit_partial(part)
        wait_for(lambda: writer.stats.partials == 1, "the part written")
        assert [h.partial for h in index.search("night market", k=1, method="text")] == [True]
        lag = writer.stats.partial_lags_s[0]
        assert 0 <= lag < 30

        writer.submit(part)  # the video done: its final write
        writer.flush(timeout=60)
        assert [h.partial for h in index.search("night market", k=1, method="text")] == [False]
        # A part of the same attempt that comes after the final write is not written: it
        # would mark the final rows partial again.
        writer.submit_partial(part)
        wait_for(lambda: writer.stats.superseded_partials == 1, "the late part skipped")
        assert [h.partial for h in index.search("night market", k=1, method="text")] == [False]
        # A newer attempt's parts are written again.
        writer.submit_partial(dataclasses.replace(part, epoch=4))
        wait_for(lambda: writer.stats.partials == 2, "the newer attempt's part")
        writer.drop_partial("long")
        wait_for(lambda: index.count_rows("long") == 0, "the partial rows dropped")
    finally:
        writer.close(timeout=60)


class BrokenSearch(LanceSearchIndex):
    def write_partial(self, results: Sequence[VideoResult]) -> None:
        raise OSError("object store unreachable")


def test_a_failed_part_costs_only_the_part(tmp_path: Path) -> None:
    index = BrokenSearch(str(tmp_path / "lance"), E5Embedder())
    writer = SinkWriter([index], batch_videos=1, flush_s=0.0)
    try:
        result = make_result("v", frames=2, texts=["OPEN"] * 2, embed=False)
        writer.submit_partial(result)
        wait_for(lambda: writer.stats.failed_partials == 1, "the part failed")
        writer.submit(result).result(timeout=60)  # the final write goes through
        assert index.count_rows("v") == 1
    finally:
        writer.close(timeout=60)


def test_several_submits_make_one_commit_per_table(tmp_path: Path) -> None:
    settings = local_settings(tmp_path, writer_batch_videos=8, writer_flush_s=30.0)
    writer = SinkWriter.from_settings(settings)
    frames, documents, segments, fingerprints, videos = writer.sinks
    assert isinstance(fingerprints, LanceFingerprintSink)
    assert isinstance(frames, LanceFrameSink)
    assert isinstance(videos, LanceSummarySink)
    assert isinstance(documents, ResultDocumentSink)
    assert isinstance(segments, LanceSegmentSink)
    warmup = writer.submit(make_result("warmup", frames=1))
    writer.flush(timeout=60)  # creates the tables without waiting for flush_s
    assert warmup.result(timeout=1) is None
    before = frames.table.version()
    assert before is not None

    # A full batch goes out at once, long before flush_s.
    futures = [writer.submit(make_result(f"v{i}", frames=20, seed=i)) for i in range(8)]
    concurrent.futures.wait(futures, timeout=60)
    assert all(f.result() is None for f in futures)
    assert frames.table.version() == before + 1
    assert frames.count_rows() == 1 + 8 * 20
    assert videos.count_rows() == 9
    assert documents.read("default", "v3", "v1") is not None
    assert segments.table.version() == before + 1  # one commit for the batch here too
    assert fingerprints.table.version() is None  # nothing hashed: no table, no commit
    assert writer.stats.last_batch_videos == 8

    writer.close()
    assert writer.stats.batches == 2
    assert writer.stats.videos == 9


def test_flush_interval_writes_a_partial_batch(tmp_path: Path) -> None:
    writer = SinkWriter.from_settings(
        local_settings(tmp_path, writer_batch_videos=100, writer_flush_s=0.05)
    )
    futures = [writer.submit(make_result(f"v{i}", frames=3, seed=i)) for i in range(3)]
    for future in futures:
        future.result(timeout=60)
    frames = writer.sinks[0]
    assert isinstance(frames, LanceFrameSink)
    assert frames.count_rows() == 9
    writer.close()


def test_close_writes_what_is_pending(tmp_path: Path) -> None:
    settings = local_settings(tmp_path, writer_batch_videos=100, writer_flush_s=3600.0)
    writer = SinkWriter.from_settings(settings)
    futures = [writer.submit(make_result(f"v{i}", frames=2, seed=i)) for i in range(4)]
    writer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert LanceSummarySink(settings.lance_uri).count_rows() == 4

    late = writer.submit(make_result("late", frames=1))
    with pytest.raises(SinkUnavailable):
        late.result(timeout=1)


def test_endpoint_down_fails_the_whole_batch_as_unavailable(tmp_path: Path) -> None:
    down = StorageSettings(
        s3_endpoint_url=f"http://127.0.0.1:{free_port()}",
        s3_access_key_id=SecretStr("testing"),
        s3_secret_access_key=SecretStr("testing"),
        s3_connect_timeout_s=0.5,
        s3_max_attempts=1,
    )
    frames = LanceFrameSink(str(tmp_path / "lance"))
    documents = ResultDocumentSink(object_store_from_uri("s3://nowhere/results", down))
    writer = SinkWriter([frames, documents], batch_videos=2, flush_s=30.0)
    futures = [writer.submit(make_result(f"v{i}", frames=2, seed=i)) for i in range(2)]
    for future in futures:
        with pytest.raises(SinkUnavailable):
            future.result(timeout=60)
    assert writer.stats.failed_batches == 1
    writer.close()


def test_next_batch_tries_again_after_a_failure(
    tmp_path: Path, s3_endpoint: str, unique: str
) -> None:
    settings = StorageSettings(
        s3_endpoint_url=s3_endpoint,
        s3_access_key_id=SecretStr("testing"),
        s3_secret_access_key=SecretStr("testing"),
        s3_max_attempts=1,
    )
    bucket = f"later-{unique}"
    documents = ResultDocumentSink(object_store_from_uri(f"s3://{bucket}/docs", settings))
    videos = LanceSummarySink(str(tmp_path / "lance"))
    writer = SinkWriter([documents, videos], batch_videos=2, flush_s=30.0)

    first = [writer.submit(make_result(f"v{i}", frames=1, seed=i)) for i in range(2)]
    for future in first:
        with pytest.raises(SinkRejected):  # no such bucket yet
            future.result(timeout=60)
    assert videos.count_rows() == 0  # the summary goes after the documents: never written

    s3_client(settings).create_bucket(Bucket=bucket)
    again = [writer.submit(make_result(f"v{i}", frames=1, seed=i)) for i in range(2)]
    for future in again:
        assert future.result(timeout=60) is None
    assert videos.count_rows() == 2
    assert documents.read("default", "v1", "v1") is not None
    writer.close()


def test_a_rejected_video_does_not_fail_the_rest_of_its_batch(tmp_path: Path) -> None:
    frames = LanceFrameSink(str(tmp_path / "lance"), embedding_dim=384)
    writer = SinkWriter([frames], batch_videos=4, flush_s=30.0)
    made = make_result("bad", frames=2)  # vectors of two sizes: a fault
    odd = dataclasses.replace(made.frames[1], embedding=unit_vectors(1, 8)[0])
    bad = dataclasses.replace(made, frames=[made.frames[0], odd])
    futures = {
        "a": writer.submit(make_result("a", frames=2)),
        "bad": writer.submit(bad),
        "b": writer.submit(make_result("b", frames=2, seed=1)),
        "c": writer.submit(make_result("c", frames=2, seed=2)),
    }
    with pytest.raises(SinkRejected) as caught:
        futures["bad"].result(timeout=60)
    assert caught.value.code == "sink_embedding_dim_mismatch"
    for name in ("a", "b", "c"):
        assert futures[name].result(timeout=60) is None
    assert frames.count_rows() == 6
    assert frames.count_rows("bad") == 0
    writer.close()


def test_submits_from_many_threads(tmp_path: Path) -> None:
    settings = local_settings(tmp_path, writer_batch_videos=16, writer_flush_s=0.05)
    with SinkWriter.from_settings(settings) as writer:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            submitted = list(
                pool.map(lambda i: writer.submit(make_result(f"v{i}", frames=2, seed=i)), range(40))
            )
        writer.flush(timeout=60)
        assert all(f.result(timeout=60) is None for f in submitted)
    assert LanceFrameSink(settings.lance_uri).count_rows() == 80
    assert LanceSummarySink(settings.lance_uri).count_rows() == 40
