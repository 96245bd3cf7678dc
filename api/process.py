"""The progress API served from the service's own process: on a local Ray, instead of a Serve
replica behind Serve's HTTP proxy.

On one machine those are two more processes, each with Ray's periodic work busy or idle (about
0.3 CPU-s per 30 s each on 2 cores) and its own copy of the search model. Here the API shares
the service's event loop: its handlers only await the store, and search runs its model in a
worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn

from api.serve import build_api
from core.config import ServiceConfig
from core.errors import ReelsenseError


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the service handles SIGTERM and Ctrl-C itself, and stops the API


class ProcessApi:
    """The API on ``config.api.host:port`` until ``stop()``."""

    def __init__(self, config: ServiceConfig) -> None:
        self.address = f"http://{config.api.host}:{config.api.port}"
        self._server = _Server(
            uvicorn.Config(
                build_api(config.to_replica_json()),
                host=config.api.host,
                port=config.api.port,
                log_level="warning",
                access_log=False,
                lifespan="on",
            )
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Returns once the API listens; raises if it cannot (its port taken, say)."""
        self._task = asyncio.create_task(self._serve(), name="api")
        while not self._server.started:
            if self._task.done():
                await self._task
                raise ReelsenseError(f"the API did not start on {self.address}", code="api_down")
            await asyncio.sleep(0.02)

    async def _serve(self) -> None:
        try:
            await self._server.serve()
        except SystemExit as exc:  # uvicorn's answer to a port it cannot bind
            raise ReelsenseError(
                f"the API cannot listen on {self.address} (exit {exc.code})", code="api_down"
            ) from None

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(ReelsenseError):
            await self._task
        self._task = None
