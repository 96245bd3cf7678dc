"""The consumer-group member against the real (Tansu) broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from consumers.admin import ensure_topics
from consumers.dead_letter import DeadLetterHeaders
from consumers.errors import BrokerUnavailable
from consumers.kafka import KafkaVideoConsumer
from core.config import KafkaSettings
from devkit.services import free_port
from devkit.workload import read_records
from tests.consumers import (
    RecordingHandler,
    event_bytes,
    group_offsets,
    kafka_settings,
    produce,
    produce_videos,
    wait_committed,
    wait_until,
)


@contextlib.asynccontextmanager
async def running(
    settings: KafkaSettings, handler: RecordingHandler
) -> AsyncIterator[KafkaVideoConsumer]:
    """A consumer running in the background, joined to its group; stopped on exit."""
    consumer = KafkaVideoConsumer(settings, handler)
    task = asyncio.create_task(consumer.run())
    try:
        await wait_until(lambda: bool(consumer.stats().assigned) or task.done())
        if task.done():
            task.result()
        yield consumer
    finally:
        await consumer.stop()
        await task


async def _topic(settings: KafkaSettings, partitions: int) -> None:
    await ensure_topics(
        settings.bootstrap, {settings.topic: partitions, settings.dead_letter_topic: 1}
    )


async def test_out_of_order_completions_end_with_every_offset_committed(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique, max_in_flight=8)
    await _topic(settings, 3)
    videos = [f"v{i}" for i in range(45)]
    await produce_videos(kafka_bootstrap, settings.topic, videos[:30])
    handler = RecordingHandler(delay_s=(0.0, 0.05))

    async with running(settings, handler) as consumer:
        await produce_videos(kafka_bootstrap, settings.topic, videos[30:])
        await wait_until(lambda: len(handler.handled) >= len(videos))
        committed, ends = await wait_committed(
            kafka_bootstrap, settings.group_id, settings.topic, 3
        )
        stats = consumer.stats()

    assert sorted(handler.handled_ids) == sorted(videos)  # once each: no rebalance happened
    assert committed == ends
    assert sum(ends.values()) == len(videos)
    assert stats.records_seen == stats.records_done == len(videos)
    assert stats.in_flight == 0
    assert {tp.partition: o for tp, o in stats.committed.items()} == ends
    assert handler.overlapped == []


async def test_in_flight_videos_are_bounded_and_partitions_paused_then_resumed(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique, max_in_flight=3)
    await _topic(settings, 3)
    videos = [f"b{i}" for i in range(24)]
    await produce_videos(kafka_bootstrap, settings.topic, videos)
    # Slower than one poll timeout, so the consumer stays full long enough to pause.
    handler = RecordingHandler(delay_s=(0.15, 0.3))

    async with running(settings, handler) as consumer:
        await wait_until(lambda: len(handler.handled) >= len(videos))
        await wait_until(lambda: consumer.stats().paused_partitions == 0)
        stats = consumer.stats()
        committed, ends = await wait_committed(
            kafka_bootstrap, settings.group_id, settings.topic, 3
        )

    assert handler.max_active == 3  # reached, never passed
    assert stats.pauses >= 1
    assert sorted(handler.handled_ids) == sorted(videos)
    assert committed == ends


async def test_invalid_events_go_to_the_dead_letter_topic_and_are_rejected(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique)
    await _topic(settings, 1)
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"ok-1", event_bytes("ok-1")),
        (b"bad-1", b"{not json"),
        (b"\xff\xfe", b"\x00\x01"),
        (b"ok-2", event_bytes("ok-3")),  # key and body disagree
        (b"bad-2", None),
        (b"ok-4", event_bytes("ok-4")),
    ]
    await produce(kafka_bootstrap, settings.topic, records, headers=[("origin", b"uploader")])
    handler = RecordingHandler(reject_fails=2)  # the status store fails twice first

    async with running(settings, handler) as consumer:
        await wait_until(lambda: len(handler.handled) + len(handler.rejected) >= len(records))
        await wait_until(lambda: consumer.stats().dead_lettered >= 4)
        committed, ends = await wait_committed(
            kafka_bootstrap, settings.group_id, settings.topic, 1
        )
        stats = consumer.stats()

    assert committed == ends == {0: len(records)}
    assert handler.handled_ids == ["ok-1", "ok-4"]
    rejected = {record.offset: (error.code, error.video_id) for error, record in handler.rejected}
    assert rejected == {
        1: ("event_not_json", "bad-1"),
        2: ("event_not_json", None),
        3: ("event_key_mismatch", "ok-3"),
        4: ("event_empty", "bad-2"),
    }
    assert stats.records_invalid == 4
    assert stats.handler_failures == 2

    letters: list[Any] = await read_records(kafka_bootstrap, settings.dead_letter_topic, 4)
    by_offset = {DeadLetterHeaders.from_headers(r.headers).original_offset: r for r in letters}
    assert sorted(by_offset) == [1, 2, 3, 4]
    for offset, record in by_offset.items():
        letter = DeadLetterHeaders.from_headers(record.headers)
        assert (record.key, record.value) == records[offset]  # the original bytes
        assert letter.reason_code == rejected[offset][0]
        assert letter.original_topic == settings.topic
        assert letter.exception_fqcn == "consumers.errors.InvalidEvent"
        assert dict(record.headers)["origin"] == b"uploader"


async def test_a_dead_letter_too_large_for_the_broker_never_holds_its_partition(
    kafka_bootstrap: str, unique: str
) -> None:
    """A record whose headers alone pass the producer's limit goes to the dead-letter topic
    without its value and its headers (their names and sizes kept); one whose key alone does
    is logged and counted as lost. Either way the offset moves on: the partition is not held."""
    limit = 64 * 1024
    settings = kafka_settings(kafka_bootstrap, unique, max_request_bytes=limit)
    await _topic(settings, 1)
    heavy = [(f"h{i}", b"x" * 2048) for i in range(100)]  # 200 KiB of headers
    await produce(kafka_bootstrap, settings.topic, [(b"heavy", b"{not json")], headers=heavy)
    await produce(kafka_bootstrap, settings.topic, [(b"k" * (2 * limit), b"{not json")])
    await produce_videos(kafka_bootstrap, settings.topic, ["after"])
    handler = RecordingHandler()

    async with running(settings, handler) as consumer:
        await wait_until(lambda: handler.handled_ids == ["after"])
        committed, ends = await wait_committed(
            kafka_bootstrap, settings.group_id, settings.topic, 1
        )
        stats = consumer.stats()

    assert committed == ends == {0: 3}
    assert (stats.dead_lettered, stats.dead_letters_lost) == (1, 1)
    [letter] = await read_records(kafka_bootstrap, settings.dead_letter_topic, 1)
    published: Any = letter
    assert (published.key, published.value) == (b"heavy", None)
    found = DeadLetterHeaders.from_headers(published.headers)
    assert (found.original_offset, found.reason_code) == (0, "event_not_json")
    assert found.value_dropped == "kafka_message_size_too_large"
    assert found.headers_dropped is not None
    dropped = json.loads(found.headers_dropped)
    assert dropped["count"] == 100
    assert dropped["headers"][:2] == [["h0", 2048], ["h1", 2048]]
    assert not any(name.startswith("h") and name[1:].isdigit() for name, _ in published.headers)


async def test_a_stuck_record_holds_back_only_its_own_partition(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique)
    await _topic(settings, 2)
    await produce_videos(kafka_bootstrap, settings.topic, ["stuck", "p0-a", "p0-b"], partition=0)
    await produce_videos(kafka_bootstrap, settings.topic, ["p1-a", "p1-b", "p1-c"], partition=1)
    release = asyncio.Event()
    handler = RecordingHandler(hold={"stuck": release})

    async def offsets() -> dict[int, int | None]:
        committed, _ = await group_offsets(kafka_bootstrap, settings.group_id, settings.topic, 2)
        return committed

    async with running(settings, handler):
        await wait_until(lambda: len(handler.handled) >= 5)
        await wait_committed(
            kafka_bootstrap,
            settings.group_id,
            settings.topic,
            2,
            until=lambda committed, _: committed[1] == 3,
        )
        await asyncio.sleep(3 * settings.commit_interval_s)  # several commit rounds pass
        assert (await offsets())[0] in (None, 0)  # nothing past the stuck record

        release.set()
        committed, ends = await wait_committed(
            kafka_bootstrap, settings.group_id, settings.topic, 2
        )

    assert committed == ends == {0: 3, 1: 3}


async def test_a_failing_handler_is_retried_and_its_offset_waits(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique)
    await _topic(settings, 1)
    await produce_videos(kafka_bootstrap, settings.topic, ["f-0", "flaky", "f-2"])
    handler = RecordingHandler()
    handler.fail["flaky"] = 10**9

    async with running(settings, handler) as consumer:
        await wait_until(lambda: handler.started.count("flaky") >= 3 and len(handler.handled) == 2)
        committed, _ = await group_offsets(kafka_bootstrap, settings.group_id, settings.topic, 1)
        assert committed[0] in (None, 1)  # f-0 may be committed, flaky and f-2 are not
        handler.fail["flaky"] = 0
        committed, ends = await wait_committed(
            kafka_bootstrap, settings.group_id, settings.topic, 1
        )
        stats = consumer.stats()

    assert committed == ends == {0: 3}
    assert sorted(handler.handled_ids) == ["f-0", "f-2", "flaky"]
    assert stats.handler_failures >= 2


async def test_records_of_the_same_video_never_run_at_once(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique, max_in_flight=8)
    await _topic(settings, 1)
    await produce_videos(kafka_bootstrap, settings.topic, ["dup", "x", "dup", "y", "dup"])
    handler = RecordingHandler(delay_s=(0.03, 0.06))

    async with running(settings, handler):
        await wait_until(lambda: len(handler.handled) >= 5)

    assert handler.handled_ids.count("dup") == 3
    assert [r.offset for v, r in handler.handled if v == "dup"] == [0, 2, 4]  # in order
    assert handler.overlapped == []
    assert handler.max_active >= 2  # other videos did run beside it


async def test_unfinished_records_come_back_after_a_restart(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique, shutdown_timeout_s=0.3)
    await _topic(settings, 2)
    videos = [f"r{i}" for i in range(20)]
    placed = dict(
        zip(videos, await produce_videos(kafka_bootstrap, settings.topic, videos), strict=True)
    )
    held = {"r3", "r11", "r12"}
    first = RecordingHandler(hold={v: asyncio.Event() for v in held})  # never released

    consumer = KafkaVideoConsumer(settings, first)
    task = asyncio.create_task(consumer.run())
    await wait_until(lambda: len(first.handled) >= len(videos) - len(held))
    await wait_until(lambda: set(first.started) >= held)
    consumer.request_stop()  # as a SIGTERM handler would
    await task
    assert not held & set(first.handled_ids)

    committed_at_stop, _ = await group_offsets(
        kafka_bootstrap, settings.group_id, settings.topic, 2
    )
    for video in held:
        partition, offset = placed[video]
        assert (committed_at_stop[partition] or 0) <= offset

    second = RecordingHandler()
    async with running(settings, second):
        await wait_until(lambda: held <= set(second.handled_ids))
        committed, ends = await wait_committed(
            kafka_bootstrap, settings.group_id, settings.topic, 2
        )

    assert committed == ends
    assert set(first.handled_ids) | set(second.handled_ids) == set(videos)  # nothing lost
    redelivered = {
        v
        for v, (partition, offset) in placed.items()
        if offset >= (committed_at_stop[partition] or 0)
    }
    assert set(second.handled_ids) == redelivered  # exactly what was not committed came back


async def test_a_second_member_joining_mid_run_shares_the_work(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique, max_in_flight=8)
    await _topic(settings, 4)
    # Each partition starts with a video held in flight across the rebalance.
    for p in range(4):
        await produce_videos(
            kafka_bootstrap, settings.topic, [f"h{p}", f"p{p}-1", f"p{p}-2"], partition=p
        )
    gate = asyncio.Event()
    held = {f"h{p}" for p in range(4)}
    first = RecordingHandler(hold=dict.fromkeys(held, gate))
    second = RecordingHandler(delay_s=(0.0, 0.03))
    later = [f"g{i}" for i in range(40)]

    async with running(settings, first) as one:
        await wait_until(lambda: set(first.started) >= held and len(first.handled) == 8)
        async with running(settings, second) as two:
            await wait_until(lambda: len(one.stats().assigned | two.stats().assigned) == 4)
            kept = {tp.partition for tp in one.stats().assigned}
            moved = {tp.partition for tp in two.stats().assigned}
            assert kept
            assert moved
            assert not kept & moved
            gate.set()
            await produce_videos(kafka_bootstrap, settings.topic, later)
            everything = {*held, *later} | {f"p{p}-{i}" for p in range(4) for i in (1, 2)}
            await wait_until(lambda: set(first.handled_ids) | set(second.handled_ids) >= everything)
            committed, ends = await wait_committed(
                kafka_bootstrap, settings.group_id, settings.topic, 4
            )
            rebalances = one.stats().rebalances

    assert committed == ends
    assert rebalances >= 1
    both = first.handled_ids + second.handled_ids
    for p in kept:
        # Kept partitions carry on with the records in hand: nothing is run twice.
        assert first.handled_ids.count(f"h{p}") == 1
        assert both.count(f"p{p}-1") == both.count(f"p{p}-2") == 1
    for p in moved:
        # Moved partitions: the held record was cancelled here and runs on the new owner.
        assert f"h{p}" not in first.handled_ids
        assert second.handled_ids.count(f"h{p}") == 1


async def test_the_broker_down_at_start_is_broker_unavailable(unique: str) -> None:
    port = free_port()
    settings = kafka_settings(f"127.0.0.1:{port}", unique, request_timeout_ms=2000)
    consumer = KafkaVideoConsumer(settings, RecordingHandler())
    with pytest.raises(BrokerUnavailable) as caught:
        await consumer.run()
    assert caught.value.code == "broker_unavailable"
    assert str(port) in str(caught.value)
    await consumer.stop()  # returns at once


async def test_stop_before_run_returns_without_joining(kafka_bootstrap: str, unique: str) -> None:
    consumer = KafkaVideoConsumer(kafka_settings(kafka_bootstrap, unique), RecordingHandler())
    consumer.request_stop()
    await consumer.run()
    assert consumer.stats().records_seen == 0
