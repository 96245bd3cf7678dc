"""Fixtures of the runtime tests; each module defines its own ``config`` (and may define its
own of these, as a watched executor)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults


@pytest.fixture
async def store(config: ServiceConfig) -> AsyncIterator[RedisCheckpointStore]:
    store = RedisCheckpointStore(config.redis)
    yield store
    await store.close()


@pytest.fixture(scope="module")
async def executor(config: ServiceConfig) -> AsyncIterator[LocalExecutor]:
    executor = LocalExecutor(config)
    yield executor
    await executor.close()


@pytest.fixture(scope="module")
async def results(config: ServiceConfig) -> AsyncIterator[LocalResults]:
    results = LocalResults(config)
    yield results
    await results.close()  # its writer's lease, before the module's Redis goes
