"""Stage work on one thread per video (``runtime.activity.StageThreads``): a video's calls all
land on the thread it leased, a thread given back serves the next video, and videos at work at
once each have their own."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import pytest

from core.records import Chunk
from runtime.activity import StageActivity, StageThreads
from runtime.pools.base import StageRunner
from stages.base import Stage

_REQUEST = contextvars.ContextVar("request", default="")


class _Where(Stage[Chunk, Chunk]):
    """Records the thread each chunk was processed on."""

    name: ClassVar[str] = "ocr"

    def __init__(self) -> None:
        self.threads: list[int] = []

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        self.threads.extend(threading.get_ident() for _ in items)
        return list(items)


def _chunk(index: int) -> Chunk:
    return Chunk(video_id="v", index=index, frames=[])


async def test_a_lease_given_back_serves_the_next_video_and_leases_at_once_differ() -> None:
    threads = StageThreads()
    activity = StageActivity("decode", "r1")

    async def ident(thread: ThreadPoolExecutor) -> int:
        with activity.working(thread=thread) as work:
            return await work.in_thread(threading.get_ident)

    with threads.lease() as first:
        one = {await ident(first) for _ in range(5)}
        with threads.lease() as second:  # a second video at work meanwhile
            other = await ident(second)
        assert len(one) == 1  # every call of a video on its one thread
        assert other not in one
        with threads.lease() as third:  # the second's thread, given back, serves the next
            assert await ident(third) == other
    with threads.lease() as again:  # the thread given back last goes out first
        assert {await ident(again)} == one
    threads.close()


async def test_work_on_a_leased_thread_counts_its_cpu_and_keeps_the_callers_context() -> None:
    threads = StageThreads()
    activity = StageActivity("ocr", "r1")
    _REQUEST.set("video-7")
    with threads.lease() as thread, activity.working(thread=thread) as work:
        seen = await work.in_thread(lambda: (_REQUEST.get(), sum(range(300_000))))
        with pytest.raises(ZeroDivisionError):
            await work.in_thread(lambda: 1 // 0)
    assert seen[0] == "video-7"
    assert work.cpu_s > 0
    assert activity.snapshot().cpu_s == pytest.approx(work.cpu_s)
    threads.close()


async def test_stage_runner_keeps_its_calls_on_one_thread_unless_given_the_callers() -> None:
    stage = _Where()
    runner = StageRunner(stage)
    for index in range(4):  # one call after another: the same thread every time
        await runner.run_one(_chunk(index))
    assert len(set(stage.threads)) == 1
    stage.threads.clear()
    await asyncio.gather(*(runner.run([_chunk(i)]) for i in range(2)))  # two at once: two
    assert len(set(stage.threads)) == 2
    stage.threads.clear()
    caller = StageThreads()
    with caller.lease() as thread:  # a video's lease (the ingest replica's fused stages)
        expected = await asyncio.get_running_loop().run_in_executor(thread, threading.get_ident)
        await runner.run_one(_chunk(9), thread=thread)
    assert stage.threads == [expected]
    caller.close()
