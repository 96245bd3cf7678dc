"""cancel_and_wait ends a task that lost a cancel, as a Redis loop does under Python 3.11."""

from __future__ import annotations

import asyncio
import random

import redis.asyncio as aioredis

from core.tasks import cancel_and_wait


async def test_a_task_that_lost_one_cancel_is_cancelled_again() -> None:
    lost = 0

    async def loop() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1  # as a library does that hands back a result for the cancel

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.02)
    async with asyncio.timeout(10):
        await cancel_and_wait(task, every_s=0.05)
    assert lost == 1
    assert task.cancelled()


async def test_what_a_task_raised_is_dropped_and_ended_tasks_are_left_alone() -> None:
    async def fails() -> None:
        raise ValueError("gone wrong")

    failed = asyncio.create_task(fails())
    finished = asyncio.create_task(asyncio.sleep(0, result=7))
    await asyncio.sleep(0.01)
    await cancel_and_wait(failed, finished)
    assert isinstance(failed.exception(), ValueError)
    assert finished.result() == 7


async def test_loops_of_redis_calls_all_end(redis_url: str) -> None:
    """redis-py sends through asyncio.wait_for, which under Python 3.11 loses a cancel that
    arrives as the write finishes: one cancel each leaves some of these loops running for
    ever. (A cancel that cuts a write closes the connection, and redis-py's own retries may
    then hold a loop for some seconds before it ends: the bound is generous.)"""
    client = aioredis.Redis.from_url(redis_url, socket_timeout=5)
    rng = random.Random(7)

    async def pings() -> None:
        while True:
            await client.ping()

    try:
        for _ in range(60):
            task = asyncio.create_task(pings())
            await asyncio.sleep(rng.random() * 0.003)
            async with asyncio.timeout(60):
                await cancel_and_wait(task, every_s=0.02)
            assert task.done()
    finally:
        await client.aclose()
