"""Stage work on one thread per video (``runtime.activity.StageThreads``): a video's calls all
land on the thread it leased, a thread given back serves the next video, and videos at work at
once each have their own; in a replica, in a stage pool's runner and in ``LocalExecutor`` (the
Ray Data backfill's actors)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import pytest

from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import Chunk
from runtime import local_executor
from runtime.activity import StageActivity, StageThreads, run_on
from runtime.local_executor import LocalExecutor
from runtime.pools.base import StageRunner
from runtime.results import LocalResults
from stages.base import Stage
from tests.runtime.support import all_done, processor, text_videos

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


async def test_a_lease_an_abandoned_stream_gives_back_still_runs_calls() -> None:
    """A stream left suspended holding its lease (a cancelled call's, never closed) in a
    reference cycle, as a cancelled task's traceback makes: the garbage collector finds it, its
    finaliser gives the lease back, and the next video's calls on that thread run."""
    threads = StageThreads()
    leased: list[int] = []
    closed = asyncio.Event()

    async def stream() -> AsyncIterator[int]:
        try:
            with threads.lease() as thread:
                leased.append(id(thread))
                yield await run_on(thread, threading.get_ident)
                yield 0  # never asked for
        finally:
            closed.set()  # the lease is back

    abandoned = stream()
    await anext(abandoned)
    cycle: list[object] = [abandoned]
    cycle.append(cycle)
    del abandoned, cycle
    gc.collect()
    await closed.wait()  # closed by the finaliser's task, on this loop
    with threads.lease() as thread:
        assert id(thread) == leased[0]
        # Without the thread kept by ``StageThreads`` the call waits for ever.
        assert await asyncio.wait_for(run_on(thread, lambda: 7), timeout=60) == 7
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


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> ServiceConfig:
    root = tmp_path_factory.mktemp("threads")
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"threads-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"file_roots": (str(root),)},
        stages={"sample_fps": 2.0, "chunk_frames": 2, "embed": {"model": "multilingual-e5-small"}},
        runtime={"workdir": str(root / "work"), "executor": "local"},
    )


async def test_local_executor_runs_a_videos_decoding_and_stages_on_its_own_thread(
    config: ServiceConfig, store: RedisCheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two videos at once: every decode, OCR and embedding call of one video on one thread (the
    last chunks' stages too, which run after its decoding ended), the two videos on two."""
    calls: dict[str, list[int]] = defaultdict(list)

    async def recorded(
        thread: ThreadPoolExecutor | None, fn: Callable[..., Any], *args: Any
    ) -> Any:
        def call() -> Any:
            result = fn(*args)
            item = result[0] if isinstance(result, list) else result
            if isinstance(item, Chunk):  # not the end of the decoding
                calls[item.video_id].append(threading.get_ident())
            return result

        return await run_on(thread, call)

    monkeypatch.setattr(local_executor, "run_on", recorded)
    refs = text_videos(Path(config.limits.file_roots[0]), ("left", "right"))
    executor, results = LocalExecutor(config), LocalResults(config)
    try:
        work = processor(config, executor, results, store)
        await asyncio.gather(*(work.process(r) for r in refs))
    finally:
        await executor.close()
        await results.close()
    await all_done(store, refs)
    # 4 chunks each: decoded, read (OCR), labelled, searched for QR codes, hashed and embedded
    assert {video: len(threads) for video, threads in calls.items()} == {"left": 24, "right": 24}
    left, right = set(calls["left"]), set(calls["right"])
    assert len(left) == len(right) == 1
    assert left != right
