"""An offset is committed only on a final transition that is on disk: the store against Valkey
(WAITAOF), Debian's Redis 7.0 (no WAITAOF) with either fsync policy, and ``reelsense serve``
in front of a Redis that cannot promise it.

A kill -9 keeps what Redis wrote in the kernel's page cache, so the restarts below check that
the acknowledged transitions come back from the AOF; the missing fsync itself is observed
through WAITAOF on a server that never fsyncs (``appendfsync no``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
import yaml

import cli.main
from checkpoint.base import VideoState
from checkpoint.durability import DurabilityMode
from checkpoint.errors import CheckpointNotDurable, CheckpointUnavailable
from checkpoint.redis_store import RedisCheckpointStore
from core.errors import PermanentError, RetryableError
from devkit.services import LocalProcess, redis_server, valkey_binary
from tests.checkpoint.test_redis_store import V1, event, ref


@pytest.fixture(scope="module")
def valkey(services_dir: Path) -> Iterator[LocalProcess]:
    """Valkey 8 (WAITAOF) with the fsync policy WAITAOF is there for: every second."""
    with redis_server(
        services_dir / "valkey-durability", appendfsync="everysec", binary=valkey_binary()
    ) as server:
        yield server


@pytest.fixture(scope="module")
def redis70_everysec(services_dir: Path) -> Iterator[LocalProcess]:
    """Debian's Redis 7.0 (no WAITAOF) fsyncing every second: it cannot confirm a write."""
    with redis_server(services_dir / "redis70-everysec", appendfsync="everysec") as server:
        yield server


def url(server: LocalProcess) -> str:
    return f"redis://127.0.0.1:{server.port}/0"


@pytest.fixture
async def raw(valkey: LocalProcess) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(url(valkey), decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
async def stores() -> AsyncIterator[list[RedisCheckpointStore]]:
    """Stores the test opens; each is closed after it."""
    opened: list[RedisCheckpointStore] = []
    yield opened
    for store in opened:
        await store.close()


def opener(
    stores: list[RedisCheckpointStore], server: LocalProcess, prefix: str
) -> Callable[..., RedisCheckpointStore]:
    """Opens stores on ``server`` under ``prefix`` with the given settings."""

    def open_store(**settings: Any) -> RedisCheckpointStore:
        store = RedisCheckpointStore.from_url(url(server), key_prefix=prefix, **settings)
        stores.append(store)
        return store

    return open_store


async def done(store: RedisCheckpointStore, video_id: str, epoch: int) -> None:
    await store.mark_done(video_id, epoch, frames=3, timings={"ocr": 0.5}, outbox=event(video_id))


async def failed(store: RedisCheckpointStore, video_id: str, epoch: int | None) -> bool:
    return await store.mark_failed(
        ref(video_id),
        epoch,
        code="broken_video",
        message="x",
        pipeline_version=V1,
        stage=None,
        outbox=event(video_id, "video.failed"),
    )


async def status_of(store: RedisCheckpointStore, video_id: str) -> VideoState | None:
    record = await store.get(video_id)
    return record.status if record is not None else None


def not_durable(error: pytest.ExceptionInfo[CheckpointUnavailable]) -> bool:
    return isinstance(error.value, RetryableError) and error.value.code == "checkpoint_not_durable"


async def outbox_ids(server: LocalProcess, prefix: str) -> set[str]:
    client = aioredis.Redis.from_url(url(server), decode_responses=True)
    try:
        entries = cast("list[Any]", await client.xrange(f"{prefix}:outbox"))
    finally:
        await client.aclose()
    return {json.loads(fields["event"])["video_id"] for _, fields in entries}


async def test_final_transitions_confirmed_by_waitaof_survive_a_kill_9(
    tmp_path: Path, stores: list[RedisCheckpointStore]
) -> None:
    with redis_server(tmp_path, appendfsync="everysec", binary=valkey_binary()) as server:
        open_store = opener(stores, server, "k9")
        store = open_store()
        assert await store.check_durability() is DurabilityMode.WAITAOF
        await done(store, "v1", (await store.claim(ref("v1"), V1)).epoch)
        assert await failed(store, "v2", (await store.claim(ref("v2"), V1)).epoch)
        server.kill()
        server.start()
        after = open_store()
        assert await status_of(after, "v1") is VideoState.DONE
        assert await status_of(after, "v2") is VideoState.FAILED
        assert await outbox_ids(server, "k9") == {"v1", "v2"}


async def test_waitaof_errors_are_retryable_not_a_quiet_step_down(
    valkey: LocalProcess, raw: aioredis.Redis, stores: list[RedisCheckpointStore], unique: str
) -> None:
    """AOF switched off under a running store: a skip and the final transitions raise the
    retryable ``checkpoint_not_durable`` (the store used to skip and return as if durable)."""
    open_store = opener(stores, valkey, unique)
    store = open_store()  # never checked: it learns the mode at its first final transition
    await done(store, "v1", (await store.claim(ref("v1"), V1)).epoch)
    await raw.config_set("appendonly", "no")
    try:
        with pytest.raises(CheckpointUnavailable) as skip:
            await store.claim(ref("v1"), V1)
        assert not_durable(skip)
        claim = await store.claim(ref("v2"), V1)  # a claim that does not skip waits for nothing
        with pytest.raises(CheckpointUnavailable) as final:
            await done(store, "v2", claim.epoch)
        assert not_durable(final)
        with pytest.raises(CheckpointUnavailable) as failing:
            await failed(store, "v3", None)
        assert not_durable(failing)
        with pytest.raises(CheckpointNotDurable, match=r"AOF is off \(appendonly no\)"):
            await open_store().check_durability()
    finally:
        await raw.config_set("appendonly", "yes")
    assert (await store.claim(ref("v1"), V1)).skip


async def test_a_transition_left_unconfirmed_is_never_answered_as_settled(
    valkey: LocalProcess, raw: aioredis.Redis, stores: list[RedisCheckpointStore], unique: str
) -> None:
    """With ``appendfsync no`` nothing is ever confirmed on disk. After a final transition
    whose WAITAOF timed out, the next attempt (another connection, as after a restart) may
    neither skip the video nor repeat the transition as confirmed: the store used to answer
    skip, and to confirm the repeat with a WAITAOF on a connection that had written nothing."""
    open_store = opener(stores, valkey, unique)
    await raw.config_set("appendfsync", "no")
    try:
        first = open_store(aof_wait_timeout_ms=100)
        claim = await first.claim(ref("v1"), V1)
        with pytest.raises(CheckpointUnavailable) as timed_out:
            await done(first, "v1", claim.epoch)
        assert not_durable(timed_out)
        assert await status_of(first, "v1") is VideoState.DONE  # in memory only
        retry = open_store(aof_wait_timeout_ms=100)
        with pytest.raises(CheckpointUnavailable) as skip:
            await retry.claim(ref("v1"), V1)
        assert not_durable(skip)
        with pytest.raises(CheckpointUnavailable) as repeated:
            await done(retry, "v1", claim.epoch)
        assert not_durable(repeated)
    finally:
        await raw.config_set("appendfsync", "everysec")
    later = open_store(aof_wait_timeout_ms=5000)
    assert (await later.claim(ref("v1"), V1)).skip  # fsynced now: confirmed, and skipped


async def test_redis_without_waitaof_fsyncing_every_second_is_refused_unless_allowed(
    redis70_everysec: LocalProcess,
    stores: list[RedisCheckpointStore],
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    open_store = opener(stores, redis70_everysec, unique)
    with pytest.raises(CheckpointNotDurable) as refused:
        await open_store().check_durability()
    assert isinstance(refused.value, PermanentError)
    assert refused.value.code == "redis_not_durable"
    said = str(refused.value)
    assert "no WAITAOF and appendfsync is everysec" in said
    for way_out in ("Redis 7.2 or newer", "appendfsync always", "require_durable: false"):
        assert way_out in said
    # A store nobody checked learns the same at its first final transition.
    lazy = open_store()
    claim = await lazy.claim(ref("v1"), V1)
    with pytest.raises(CheckpointNotDurable):
        await done(lazy, "v1", claim.epoch)
    relaxed = open_store(require_durable=False)
    with caplog.at_level(logging.WARNING, logger="checkpoint.redis_store"):
        assert await relaxed.check_durability() is DurabilityMode.RELAXED
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("may lose up to about a second of final transitions" in m for m in warned)
    await done(relaxed, "v1", claim.epoch)
    assert (await relaxed.claim(ref("v1"), V1)).skip


async def test_redis_without_waitaof_fsyncing_always_is_accepted_and_survives_a_kill_9(
    tmp_path: Path, stores: list[RedisCheckpointStore]
) -> None:
    with redis_server(tmp_path) as server:  # the embedded default: appendfsync always
        open_store = opener(stores, server, "k9")
        store = open_store()
        assert await store.check_durability() is DurabilityMode.FSYNC_ALWAYS
        await done(store, "v1", (await store.claim(ref("v1"), V1)).epoch)
        server.kill()
        server.start()
        assert await status_of(open_store(), "v1") is VideoState.DONE
        assert await outbox_ids(server, "k9") == {"v1"}


def test_serve_refuses_a_redis_that_cannot_promise_durability(
    redis70_everysec: LocalProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2 with the reason, before Ray or anything of the service starts."""
    started: list[object] = []

    def run_service(config: object, stop: object, *, local_ray: bool) -> int:
        started.append(config)
        return 0

    monkeypatch.setattr(cli.main, "_run_service", run_service)
    config = tmp_path / "serve.yaml"
    sections: dict[str, Any] = {
        "redis": {"url": url(redis70_everysec)},
        "api": {"allow_anonymous": True},
        "notify": {"allow_unsigned": True},
    }
    config.write_text(yaml.safe_dump(sections))
    assert cli.main.main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "reelsense serve: redis 7.0" in err
    assert "cannot confirm that a final transition is on disk" in err
    assert started == []
    sections["redis"]["require_durable"] = False  # accepted by choice: serve goes on
    config.write_text(yaml.safe_dump(sections))
    assert cli.main.main(["serve", "--config", str(config)]) == 0
    assert len(started) == 1


async def _replicating(primary: LocalProcess, replicas: int) -> None:
    """Until ``primary`` has ``replicas`` replicas online (synced)."""
    client = aioredis.Redis.from_url(url(primary), decode_responses=True)
    try:
        for _ in range(200):
            info = await client.info("replication")
            online = [
                value
                for key, value in info.items()
                if key.startswith("slave") and isinstance(value, dict)
            ]
            if sum(1 for slave in online if slave.get("state") == "online") >= replicas:
                return
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    raise AssertionError(f"{primary.name} on {primary.port} never had {replicas} replicas")


@pytest.mark.parametrize("server", ["valkey", "redis70"])
async def test_a_final_transition_waits_for_a_replica_when_asked(
    tmp_path: Path, unique: str, server: str
) -> None:
    """With ``redis.replicas_to_confirm`` 1 a final transition is confirmed by the replica too
    (WAITAOF 1 1 on Valkey; WAIT 1 on Redis 7.0, which has no WAITAOF): with the replica up it
    goes through; with the replica gone it is ``checkpoint_not_durable``, so its offset would
    wait rather than rest on the primary's disk alone."""
    binary = valkey_binary() if server == "valkey" else None
    fsync = "everysec" if server == "valkey" else "always"
    primary = redis_server(tmp_path / "primary", appendfsync=fsync, binary=binary).start()
    replica = redis_server(
        tmp_path / "replica", appendfsync=fsync, binary=binary, replica_of=primary.port
    )
    try:
        replica.start()
        await _replicating(primary, 1)
        # With the replica up, the confirmation is waited for as long as a loaded machine
        # needs (its fsync runs once a second); with it gone, 500 ms each is enough to fail.
        patient = RedisCheckpointStore.from_url(
            url(primary), key_prefix=unique, replicas_to_confirm=1, aof_wait_timeout_ms=10_000
        )
        store = RedisCheckpointStore.from_url(
            url(primary), key_prefix=unique, replicas_to_confirm=1, aof_wait_timeout_ms=500
        )
        try:
            claim = await patient.claim(ref("v1"), V1)
            await patient.mark_done("v1", claim.epoch, frames=1, timings={}, outbox=event("v1"))
            replica.stop()
            claim = await store.claim(ref("v2"), V1)
            with pytest.raises(CheckpointUnavailable) as unconfirmed:
                await store.mark_done("v2", claim.epoch, frames=1, timings={}, outbox=event("v2"))
            assert unconfirmed.value.code == "checkpoint_not_durable"
            assert "replicas" in str(unconfirmed.value)
        finally:
            await patient.close()
            await store.close()
    finally:
        replica.stop()
        primary.stop()
