"""What each disruption of the crash soak (``bench.soak.chaos``) does, and the state they share:
the service's processes, the broker and Redis, the object store's gate, Sentinel."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

from bench.soak.chaos_faults import Gate, kill_replica, pause
from bench.soak.chaos_plan import Action, ChaosOptions
from devkit.sentinel_redis import SentinelRedis
from devkit.service_process import ServiceProcess
from devkit.service_run import ServiceRun
from devkit.stack import EmbeddedStack

log = logging.getLogger("bench.soak.chaos")


class Disruptions:
    """Fires the soak's disruptions, one ``_fire_{kind}`` per kind of ``chaos_plan.KINDS``."""

    def __init__(
        self,
        options: ChaosOptions,
        stack: EmbeddedStack,
        run: ServiceRun,
        gate: Gate | None,
        sentinel: SentinelRedis | None,
    ) -> None:
        self.options = options
        self.stack = stack
        self.service_run = run
        self.gate = gate  # in front of the object store, for its outages and denials
        self.sentinel = sentinel  # Redis under Sentinel, for its failovers
        self.rng = random.Random(options.seed)
        kinds = ["kills", "replica_kills", "broker_bounces", "redis_bounces", "rebalances"]
        kinds += ["outages", "freezes", "poisons", "replica_freezes", "writer_kills"]
        self.counts = dict.fromkeys([*kinds, "failovers", "denials"], 0)
        self.leave_exit_codes: list[int | None] = []
        self.unexpected_exits: list[str] = []
        self.joined_at = 0.0
        self.side: asyncio.Task[None] | None = None  # b's join and freezes, when planned
        self.start_s: list[float] = []  # from start to a healthy API, per (re)start
        # Production retry pacing: a lost replica or a Redis restart must not exhaust the
        # attempts of a video before the part is back.
        # Sources on 127.0.0.1 (the drips) allowed, and a fetch deadline they run into.
        self.config = run.configure(
            runtime={"retry_backoff_s": (1.0, 5.0, 30.0)},
            limits={"allow_private": True, "total_timeout_s": 10.0},
            # A frozen replica holds a call this long, then the call is an outage.
            ray={"call_timeout_s": 15.0},
            # A dead endpoint's messages keep retrying for the whole run, in the schedule.
            notify={"retry_schedule_s": (5.0, 30.0, 60.0, 120.0, 300.0), "timeout_s": 5.0},
        )
        self.session_s = self.config.kafka.session_timeout_ms / 1000

    def _restart_exited(self) -> None:
        """A service that exited on its own is a finding; it is restarted so the run goes on."""
        for name, service in self.service_run.processes.items():
            code = service.exited()
            if code is not None:
                self.unexpected_exits.append(f"{name} exited with {code}")
                log.warning("service %s exited with %s; restarting", name, code)
                service.kill()
                service.start()

    async def _fire(self, action: Action) -> None:
        fire: Callable[[], Awaitable[None]] = getattr(self, f"_fire_{action.kind}")
        await fire()

    async def _fire_kill(self) -> None:
        service = self.service_run.process("a")
        await asyncio.to_thread(service.kill)
        service.start()
        self.counts["kills"] += 1
        await self._healthy("a")  # the next disruption meets a running service

    async def _fire_replica(self) -> None:
        if await kill_replica(self.service_run, "ocr"):
            self.counts["replica_kills"] += 1

    async def _fire_broker(self) -> None:
        await self.stack.bounce(self.stack.broker, self.rng.uniform(1.0, 3.0))
        self.counts["broker_bounces"] += 1

    async def _fire_redis(self) -> None:
        await self.stack.bounce(self.stack.redis, self.rng.uniform(0.5, 2.0))
        self.counts["redis_bounces"] += 1

    async def _fire_outage(self) -> None:
        if self.gate is not None:
            await self.gate.outage(self.options.outage_s)
            self.counts["outages"] += 1

    async def _fire_freeze_replica(self) -> None:
        replica = self.service_run.process("a").replica("ocr")
        if replica is not None:
            await pause(replica.pid, self.options.replica_freeze_s)
            self.counts["replica_freezes"] += 1

    async def _fire_writer(self) -> None:
        if await kill_replica(self.service_run, "sink-writer"):
            self.counts["writer_kills"] += 1

    async def _fire_failover(self) -> None:
        if self.sentinel is not None:
            await self.sentinel.fail_over()
            self.counts["failovers"] += 1

    async def _fire_denial(self) -> None:
        if self.gate is not None:
            await self.gate.denial(self.options.denial_s)
            self.counts["denials"] += 1

    async def _fire_join(self) -> None:
        """Start b; with freezes planned, b starts and freezes beside the other disruptions
        (a start takes a minute, and the work must not race ahead of the freeze meanwhile)."""
        if self.options.freezes:
            self.side = asyncio.create_task(self._join_and_freeze())
        else:
            await self._join()

    async def _join(self) -> None:
        self.service_run.start_process("b")
        await self._healthy("b")  # then its consumer joins the group
        self.joined_at = time.monotonic()
        self.counts["rebalances"] += 1

    async def _join_and_freeze(self) -> None:
        """b joins, freezes, wakes (and finds its attempts taken over), then leaves at once:
        a second consumer working beside a would let the work race past the kills planned
        for later shares, which only a receives."""
        await self._join()
        for _ in range(self.options.freezes):
            b = await self._joined()
            if b is not None and b.process is not None:  # past its session and its leases
                await pause(b.process.pid, self.session_s + self.config.runtime.lease_s + 5)
                self.counts["freezes"] += 1
        await self._leave()

    async def _fire_leave(self) -> None:
        if self.side is not None:
            await self.side
        await self._leave()

    async def _leave(self) -> None:
        if b := await self._joined():
            self.leave_exit_codes.append(await asyncio.to_thread(b.stop))
            self.counts["rebalances"] += 1

    async def _joined(self) -> ServiceProcess | None:
        """Process b once the rebalance of its join is over (it holds partitions); None
        when it does not run."""
        b = self.service_run.processes.get("b")
        if b is None or not b.running:
            return None
        await asyncio.sleep(max(0.0, self.joined_at + self.session_s + 2 - time.monotonic()))
        return b

    async def _healthy(self, name: str) -> None:
        """Waits for a started service's API; records how long the start took."""
        started = time.monotonic()
        try:
            await self.service_run.process(name).wait_healthy(timeout_s=300)
        except TimeoutError:
            log.warning("service %s is not healthy after 300 s", name)
            return
        self.start_s.append(time.monotonic() - started)
