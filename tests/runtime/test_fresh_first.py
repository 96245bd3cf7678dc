"""Fresh uploads first: within an ingest replica a bulk video waits between chunks while a
fresh one is ingested, and a fresh video never waits for a decode slot bulk work holds."""

from __future__ import annotations

import asyncio

from core.records import VideoRef
from runtime.chunk_stages import DecodeSlots
from runtime.pools.ingest import FreshFirst

FRESH = VideoRef("fresh", "file:///fresh.mp4")
BULK = VideoRef("bulk", "file:///bulk.mp4", lane="bulk")


async def test_bulk_chunks_wait_while_a_fresh_video_is_ingested() -> None:
    gate = FreshFirst()
    await asyncio.wait_for(gate.turn(BULK), 10)  # nothing fresh: no wait
    decoded: list[str] = []

    async def bulk_video(chunks: int) -> None:
        async with gate.call(BULK):
            for _ in range(chunks):
                await gate.turn(BULK)
                decoded.append("bulk")
                await asyncio.sleep(0.01)

    async with gate.call(FRESH):
        await asyncio.wait_for(gate.turn(FRESH), 10)  # a fresh video never waits
        bulk = asyncio.create_task(bulk_video(3))
        await asyncio.sleep(0.2)
        assert decoded == []  # waiting at its first chunk
        assert gate.fresh == 1
        async with gate.call(FRESH):  # two fresh videos at once: still waiting after one
            await asyncio.sleep(0.05)
        assert decoded == []
    await asyncio.wait_for(bulk, 10)  # the last fresh video gone: the bulk one goes on
    assert decoded == ["bulk"] * 3
    assert gate.fresh == 0


async def test_a_fresh_call_that_fails_still_lets_bulk_work_go_on() -> None:
    gate = FreshFirst()
    try:
        async with gate.call(FRESH):
            raise OSError("the download broke")
    except OSError:
        pass
    await asyncio.wait_for(gate.turn(BULK), 10)
    assert gate.fresh == 0


async def test_a_fresh_video_decodes_beside_bulk_work_and_waits_only_behind_fresh_ones() -> None:
    slots = DecodeSlots(2)
    await slots.acquire("bulk")
    await slots.acquire("bulk")
    await asyncio.wait_for(slots.acquire("fresh"), 10)  # the bulk videos hold both: no wait
    more_bulk = asyncio.create_task(slots.acquire("bulk"))
    await asyncio.sleep(0.05)
    assert not more_bulk.done()
    slots.release("bulk")  # one bulk and the fresh one decode: still full
    await asyncio.sleep(0.05)
    assert not more_bulk.done()
    slots.release("fresh")
    await asyncio.wait_for(more_bulk, 10)
    assert slots.held == {"fresh": 0, "bulk": 2}

    fresh_only = DecodeSlots(1)
    await fresh_only.acquire("fresh")
    second = asyncio.create_task(fresh_only.acquire("fresh"))
    await asyncio.sleep(0.05)
    assert not second.done()  # behind a fresh video, a fresh one waits as it always did
    fresh_only.release("fresh")
    await asyncio.wait_for(second, 10)
