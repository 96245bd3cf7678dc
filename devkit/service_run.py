"""One throwaway run of the service on a given broker and Redis: the one way the tests and the
crash soak start the service.

A run holds its configuration (names unique to the run, folders under its root), the webhook
receiver that plays the business system, a checkpoint store to watch progress through, and
the service itself: in this process (``ReelsenseService`` on the caller's Ray) or as named
``reelsense serve`` processes, each with its own Ray (or all on one Ray cluster: ``ray.address``
configured), that can be killed and started again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Self

from checkpoint.base import VideoStatus
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from devkit.receiver import WebhookReceiver
from devkit.run_config import dump_config, service_config, webhook_secret, with_sections
from devkit.service_process import ServiceProcess
from devkit.services import free_port
from devkit.workload import (
    KafkaRecord,
    Published,
    committed_and_end,
    publish,
    upload_record,
    wait_final,
)

if TYPE_CHECKING:
    from runtime.service import ReelsenseService


class ServiceRun:
    """An async context manager: on exit every service it started stops (processes get
    SIGTERM, then kill -9), then the store and the receiver close."""

    def __init__(
        self,
        root: Path,
        *,
        bootstrap: str,
        redis_url: str,
        unique: str,
        executor: str = "ray",
        process_env: Mapping[str, str] | None = None,
    ) -> None:
        """``process_env``: what the service processes get in their environment besides the
        webhook secret (a Ray cluster's token, with ``ray.address`` configured)."""
        self.root = root
        self.unique = unique
        self.secret = webhook_secret()
        self.receiver = WebhookReceiver(secret=self.secret)
        self.config = service_config(
            root,
            bootstrap=bootstrap,
            redis_url=redis_url,
            unique=unique,
            api_port=free_port(),
            hook_url=self.receiver.url(),
            secret=self.secret,
            executor=executor,
        )
        self.process_env = dict(process_env or {})
        self.processes: dict[str, ServiceProcess] = {}
        self.service: ReelsenseService | None = None
        self._running: asyncio.Task[None] | None = None
        self._store: RedisCheckpointStore | None = None

    @property
    def videos_dir(self) -> Path:
        """Where the service may read local video files from."""
        return self.root / "videos"

    @property
    def store(self) -> RedisCheckpointStore:
        """The run's checkpoint records, as the service writes them."""
        if self._store is None:
            self._store = RedisCheckpointStore(self.config.redis)
        return self._store

    def configure(self, **sections: dict[str, object]) -> ServiceConfig:
        """Replace some settings (``stages={"chunk_frames": 4}``) before any service starts."""
        if self.service is not None or self.processes or self._store is not None:
            raise RuntimeError("configure a run before it starts a service or opens its store")
        self.config = with_sections(self.config, **sections)
        return self.config

    async def __aenter__(self) -> Self:
        await self.receiver.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.stop_in_process()
            # In a thread: the receiver in this loop still answers the deliveries made while
            # the processes drain.
            await asyncio.to_thread(self.stop_processes)
        finally:
            if self._store is not None:
                await self._store.close()
            await self.receiver.stop()

    # -- in this process ----------------------------------------------------------------------

    async def start_in_process(self) -> ReelsenseService:
        """The service in this process, on the Ray this process is connected to."""
        from runtime.service import ReelsenseService

        if self.service is not None:
            raise RuntimeError("the service of this run already runs in this process")
        service = ReelsenseService(self.config)
        await service.start()
        self.service = service
        self._running = asyncio.create_task(service.run())
        return service

    async def stop_in_process(self) -> None:
        """Stop the in-process service and wait until it has shut down (a no-op if none)."""
        service, running = self.service, self._running
        self.service, self._running = None, None
        if service is not None and running is not None:
            service.request_stop()
            await running

    # -- as processes -------------------------------------------------------------------------

    def process(self, name: str = "a") -> ServiceProcess:
        """The ``reelsense serve`` process ``name`` (made, not started, on first use): its own
        API port and notifier name, the same topics, group, Redis and sinks as the others."""
        if name not in self.processes:
            port = free_port()
            # A name of its own on the video leases, kept over restarts: a process killed and
            # started again takes its videos back at once (as a replica with a stable pod name).
            config = with_sections(
                self.config,
                api={"port": port},
                notify={"consumer_name": f"{self.unique}-{name}"},
                runtime={"instance_id": f"{self.unique}-{name}"},
            )
            path = dump_config(config, self.root / f"service-{name}.yaml")
            log = self.root / "logs" / f"service-{name}.log"
            self.processes[name] = ServiceProcess(
                path, self.secret, log, api_port=port, env=self.process_env
            )
        return self.processes[name]

    def start_process(self, name: str = "a") -> ServiceProcess:
        return self.process(name).start()

    def stop_processes(self, *, timeout_s: float = 60) -> None:
        """SIGTERM to every running process (then kill -9 of what is left)."""
        for process in self.processes.values():
            with contextlib.suppress(OSError):
                process.stop(timeout_s=timeout_s)

    # -- work ---------------------------------------------------------------------------------

    async def publish(
        self, records: Iterable[KafkaRecord | tuple[bytes, bytes]]
    ) -> list[Published]:
        """Publish records to the run's upload topic."""
        return await publish(self.config.kafka.bootstrap, self.config.kafka.topic, records)

    async def upload(self, videos: Mapping[str, Path]) -> list[Published]:
        """One upload event per video (id -> local file), in the order given."""
        return await self.publish(upload_record(v, path) for v, path in videos.items())

    async def wait_final(
        self, ids: Sequence[str], *, timeout_s: float = 600
    ) -> dict[str, VideoStatus]:
        """Until every one of ``ids`` is done or failed; AssertionError if not in time."""
        return await wait_final(self.store, ids, timeout_s=timeout_s)

    async def wait_until(
        self,
        ids: Sequence[str],
        condition: Callable[[dict[str, VideoStatus]], bool],
        *,
        timeout_s: float = 240,
    ) -> dict[str, VideoStatus]:
        """Until the records of ``ids`` (those written yet) meet ``condition``; returns them.
        AssertionError if they do not in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            statuses = {}
            for video_id in ids:
                status = await self.store.get(video_id)
                if status is not None:
                    statuses[video_id] = status
            if condition(statuses):
                return statuses
            if loop.time() >= deadline:
                states = {v: s.status.value for v, s in statuses.items()}
                raise AssertionError(f"not reached in {timeout_s}s: {states}")
            await asyncio.sleep(0.2)

    async def committed_and_end(self) -> tuple[dict[int, int], dict[int, int]]:
        """Per partition of the upload topic: the group's committed offset and the end."""
        kafka = self.config.kafka
        return await committed_and_end(kafka.bootstrap, kafka.topic, kafka.group_id)

    async def wait_committed(self, *, timeout_s: float = 30) -> bool:
        """Until the group has committed every partition to its end; False if not in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            committed, ends = await self.committed_and_end()
            if committed == ends:
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.3)
