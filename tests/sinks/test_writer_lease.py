"""One writer per table, enforced: the writer lease and its fencing token, on a real Redis,
real Lance tables and writers in processes of their own; and what Lance itself guarantees."""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import lance
import pytest
import redis

from core.config import RedisSettings
from core.errors import RetryableError
from devkit.services import redis_server
from sinks.lance import LanceFrameSink, LanceSummarySink, videos_schema
from sinks.lance_rows import table_uri
from sinks.lance_table import LanceTable
from sinks.writer import SinkWriter
from sinks.writer_lease import NoWriterLease, WriterLease, lease_key
from tests.sinks import make_result

LEASE_S = 2.0  # short: a writer without the lease waits this long before its batch fails
REFUSED = {"writer_lease_lost", "writer_lease_busy"}
SPAWN = multiprocessing.get_context("spawn")


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def lease_settings(redis_url: str, unique: str, **extra: Any) -> RedisSettings:
    return RedisSettings(url=redis_url, key_prefix=f"lease-{unique}", **extra)


def writer(root: str, lease: WriterLease, *, batch_videos: int = 1) -> SinkWriter:
    """Frames and summaries, ``batch_videos`` per commit."""
    sinks = [LanceFrameSink(root), LanceSummarySink(root)]
    return SinkWriter(sinks, batch_videos=batch_videos, flush_s=60.0, lease=lease)


def rows_of(root: str, table: str) -> dict[str, int]:
    """video -> its rows in ``table``."""
    return dict(Counter(r["video_id"] for r in LanceTable(table_uri(root, table)).rows()))


def rows_per_video(root: str) -> tuple[dict[str, int], dict[str, int]]:
    """video -> rows in ``frames``, video -> rows in ``videos``."""
    return rows_of(root, "frames"), rows_of(root, "videos")


def expire(client: redis.Redis, lease: WriterLease) -> None:
    """Let a lease lapse for real, as it does when its holder stops renewing (frozen, cut off)."""
    client.pexpire(lease.key, 1)
    wait_for(lambda: client.hget(lease.key, "owner") != lease.owner, "the lease lapsed")


def _writer_process(
    root: str,
    settings: RedisSettings,
    name: str,
    batch_videos: int,
    commands: Queue[list[str] | None],
    replies: Queue[tuple[str, Any, int | None]],
) -> None:
    """A writer in a process of its own: writes the videos it is sent, one batch each time,
    and answers video -> "ok" or the error's code, and its token."""
    lease = WriterLease(settings, root, lease_s=LEASE_S, owner=name)
    with writer(root, lease, batch_videos=batch_videos) as sinks:
        replies.put((name, "ready", None))
        while (ids := commands.get()) is not None:
            futures = {v: sinks.submit(make_result(v, frames=3, seed=i)) for i, v in enumerate(ids)}
            outcome = {}
            for video_id, future in futures.items():
                error = future.exception(timeout=120)
                outcome[video_id] = "ok" if error is None else getattr(error, "code", repr(error))
            replies.put((name, outcome, lease.token))


def test_two_writer_processes_on_the_same_new_keys_take_turns(
    tmp_path: Path, redis_url: str, unique: str
) -> None:
    """Both write the same new videos at once: each commits only under a lease of its own
    (they take turns: a writer lets the lease go when it has nothing left to write), a batch
    refused meanwhile is retried, and every key is there once."""
    root, settings = str(tmp_path / "lance"), lease_settings(redis_url, unique)
    ids = [f"same-{i}" for i in range(6)]
    commands = {name: SPAWN.Queue() for name in ("a", "b")}
    replies: Queue[tuple[str, Any, int | None]] = SPAWN.Queue()
    processes = [
        SPAWN.Process(target=_writer_process, args=(root, settings, name, len(ids), queue, replies))
        for name, queue in commands.items()
    ]
    for process in processes:
        process.start()
    client = redis.Redis.from_url(redis_url)
    try:
        assert sorted(replies.get(timeout=120)[1] for _ in processes) == ["ready", "ready"]
        for queue in commands.values():
            queue.put(ids)
        written: set[str] = set()
        while written != {"a", "b"}:
            name, outcome, _ = replies.get(timeout=120)
            if set(outcome.values()) == {"ok"}:
                written.add(name)
                continue
            # Waited longer than a lease for the other's turn: retried, as the processor does.
            assert set(outcome.values()) <= REFUSED, outcome
            commands[name].put(ids)
        # Two writers, each with a lease (a token) of its own: never one lease for both.
        assert int(client.get(f"{lease_key(settings.key_prefix, root)}:token") or 0) >= 2
    finally:
        client.close()
        for queue in commands.values():
            queue.put(None)
        for process in processes:
            process.join(timeout=60)
    assert [process.exitcode for process in processes] == [0, 0]
    frames, videos = rows_per_video(root)
    assert frames == dict.fromkeys(ids, 3)
    assert videos == dict.fromkeys(ids, 1)


def test_a_writer_whose_lease_was_taken_commits_nothing_and_the_holder_writes_its_batch(
    tmp_path: Path, redis_url: str, unique: str
) -> None:
    root, settings = str(tmp_path / "lance"), lease_settings(redis_url, unique)
    # A long lease: a renewal never comes between the lapse below and the next batch.
    first = writer(root, WriterLease(settings, root, lease_s=60.0, owner="first"))
    first.submit(make_result("early", frames=2)).result(timeout=60)
    second = writer(root, WriterLease(settings, root, lease_s=60.0, owner="second"))
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert first.lease is not None
        assert second.lease is not None
        assert first.lease.token is None  # let go: it had nothing left to write
        first_token = first.lease.hold()  # its next batch begins: the lease is its own

        expire(client, first.lease)  # ``first`` froze past its lease
        second.submit(make_result("taken", frames=2)).result(timeout=60)
        second_token = int(client.get(f"{second.lease.key}:token") or 0)
        assert second_token > first_token
        frames = LanceFrameSink(root)
        version = frames.table.version()

        late = make_result("late", frames=2, seed=1)
        with pytest.raises(NoWriterLease) as caught:
            first.submit(late).result(timeout=120)
        assert isinstance(caught.value, RetryableError)
        assert caught.value.code in REFUSED
        assert frames.table.version() == version  # not committed
        assert frames.count_rows("late") == 0

        second.submit(late).result(timeout=60)  # the retry, through the holder
        assert rows_per_video(root) == (
            {"early": 2, "taken": 2, "late": 2},
            {"early": 1, "taken": 1, "late": 1},
        )
    finally:
        first.close(timeout=60)
        second.close(timeout=60)
        client.close()


def test_tokens_grow_with_every_acquisition(tmp_path: Path, redis_url: str, unique: str) -> None:
    root, settings = str(tmp_path / "lance"), lease_settings(redis_url, unique)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    tokens: list[int] = []
    for _ in range(3):  # taken, then released on close: the next writer takes it at once
        lease = WriterLease(settings, root, lease_s=60.0)
        tokens.append(lease.hold(wait=False))
        assert lease.hold(wait=False) == tokens[-1]  # confirmed and extended, same token
        lease.close()
    first = WriterLease(settings, root, lease_s=60.0, owner="first")
    second = WriterLease(settings, root, lease_s=60.0, owner="second")
    try:
        tokens.append(first.hold(wait=False))
        with pytest.raises(NoWriterLease) as busy:
            second.hold(wait=False)
        assert busy.value.code == "writer_lease_busy"
        assert busy.value.retry_after is not None
        assert busy.value.retry_after > 0

        expire(client, first)
        tokens.append(second.hold(wait=False))
        with pytest.raises(NoWriterLease) as lost:
            first.hold(wait=False)
        assert lost.value.code in REFUSED
        assert first.token is None
        assert tokens == sorted(set(tokens)), tokens  # strictly increasing
        assert int(client.get(f"{first.key}:token") or 0) == tokens[-1]
    finally:
        first.close()
        second.close()
        client.close()


def test_a_token_handed_out_again_after_redis_lost_its_data_is_not_mistaken(
    tmp_path: Path, redis_url: str, unique: str
) -> None:
    """Tokens start again at 1 when Redis loses its keys: the lease names its owner too, so
    the old holder of token 1 does not take the new holder's token 1 for its own."""
    root, settings = str(tmp_path / "lance"), lease_settings(redis_url, unique)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    old = WriterLease(settings, root, lease_s=60.0, owner="old")
    new = WriterLease(settings, root, lease_s=60.0, owner="new")
    try:
        assert old.hold(wait=False) == 1
        client.delete(old.key, f"{old.key}:token")  # Redis restarted without its data
        assert new.hold(wait=False) == 1
        with pytest.raises(NoWriterLease):
            old.hold(wait=False)
    finally:
        old.close()
        new.close()
        client.close()


def test_writers_of_one_process_share_its_lease(
    tmp_path: Path, redis_url: str, unique: str
) -> None:
    """The lease fences processes: a second writer in the same process (a test, a sequential
    run) takes the same token, and the lease stays until the last of them closes."""
    root, settings = str(tmp_path / "lance"), lease_settings(redis_url, unique)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    one, two = WriterLease(settings, root), WriterLease(settings, root)
    other = WriterLease(settings, root, owner="another process")
    try:
        token = one.hold(wait=False)
        assert two.hold(wait=False) == token
        one.close()
        assert two.hold(wait=False) == token  # still held: ``two`` is open
        two.close()
        assert client.exists(one.key) == 0  # released by the last
        assert other.hold(wait=False) > token
    finally:
        for lease in (one, two, other):
            lease.close()
        client.close()


def test_redis_down_at_commit_time_fails_the_batch_retryably(tmp_path: Path, unique: str) -> None:
    root = str(tmp_path / "lance")
    with redis_server(tmp_path / "redis") as server:  # a Redis of its own, stopped below
        url = f"redis://127.0.0.1:{server.port}/0"
        settings = lease_settings(url, unique, connect_timeout_s=0.5, socket_timeout_s=0.5)
        sinks = writer(root, WriterLease(settings, root, lease_s=60.0))
        try:
            sinks.submit(make_result("before", frames=2)).result(timeout=60)
            frames = LanceFrameSink(root)
            version = frames.table.version()

            server.stop()
            down = make_result("down", frames=2, seed=1)
            with pytest.raises(NoWriterLease) as caught:
                sinks.submit(down).result(timeout=60)
            assert caught.value.code == "writer_lease_unavailable"
            assert isinstance(caught.value, RetryableError)
            assert frames.table.version() == version
            assert frames.count_rows("down") == 0

            server.start()  # AOF: the lease is still this writer's, and it writes on
            sinks.submit(down).result(timeout=60)
            assert rows_per_video(root) == ({"before": 2, "down": 2}, {"before": 1, "down": 1})
            assert sinks.stats.failed_batches == 1
        finally:
            sinks.close(timeout=60)


def _merge_process(uri: str, video_ids: list[str], retries: int, ready: Barrier) -> None:
    """Merges the same new rows as another process, both from the same version: a writer that
    lost its lease while frozen between its check and its commit."""
    dataset = lance.dataset(uri)
    rows = LanceSummarySink.rows_of([make_result(v, frames=1) for v in video_ids])
    ready.wait(timeout=60)
    merge = dataset.merge_insert("video_id").when_matched_update_all()
    merge.when_not_matched_insert_all().conflict_retries(retries).execute(rows)


@pytest.mark.parametrize("retries", [0, 5])
def test_lance_itself_never_inserts_a_declared_key_twice(tmp_path: Path, retries: int) -> None:
    """What closes the window the lease leaves: the key declared as the table's primary key
    (as every table of ours declares it), a commit that inserts a key a concurrent commit
    inserted conflicts. Without retries it fails (the process exits with an error); with them
    it is redone as an update. Either way each key is there once."""
    uri = table_uri(str(tmp_path), "videos")
    LanceTable(uri).create(videos_schema(), keys=("video_id",))
    ids = [f"new-{i}" for i in range(20)]
    ready = SPAWN.Barrier(2)
    processes = [
        SPAWN.Process(target=_merge_process, args=(uri, ids, retries, ready)) for _ in range(2)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    exits = sorted(process.exitcode or 0 for process in processes)
    assert exits == ([0, 1] if retries == 0 else [0, 0])
    assert rows_of(str(tmp_path), "videos") == dict.fromkeys(ids, 1)
