"""Fixtures of the runtime tests; each module defines its own ``config``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig


@pytest.fixture
async def store(config: ServiceConfig) -> AsyncIterator[RedisCheckpointStore]:
    store = RedisCheckpointStore(config.redis)
    yield store
    await store.close()
