"""Crash soak: the service under kill -9, lost stage replicas, broker and Redis restarts and a
consumer joining and leaving, then an offline check that nothing was lost or doubled.

    python -m bench.chaos --videos 50 --kills 20 --json chaos.json [--seed 7] [--workdir DIR]
        [--outages 1 --outage-s 120 --freezes 1 --poisons 2 --drips 1]

Run from the repository root. Starts its own stack on 127.0.0.1 (moto as S3, Tansu storing
its log in that S3 so a restarted broker keeps every record and committed offset, redis-server
with AOF, a webhook receiver), writes ``--videos`` sample videos of 2-20 s with burned-in
text, runs ``reelsense serve`` as a subprocess with its own local Ray and publishes one event
per video. Disruptions fire at seeded moments, each once the service has got through a drawn
share of the work (so every one hits work in flight): kill -9 of the service with everything
it started (the next disruption waits until the restarted service answers again), SIGKILL of
one OCR Serve replica, a broker restart, a Redis SIGKILL and restart, and a second service
process that joins the consumer group and later leaves on SIGTERM. Hostile inputs and
outages come from ``bench.chaos_faults``: poison re-sends of done videos, slow-drip sources,
an outage of the object store (its own moto, behind a gate that refuses connections for
minutes) and the joined process
frozen past its session and leases while it holds partitions.
When every video is final, ``bench.chaos_verify`` checks the sinks, the webhooks, the
checkpoints and the committed offsets. Exit code 1 when an invariant fails. Everything started
is stopped by PID, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.chaos_faults import (
    DripSource,
    Gate,
    check_hostile,
    drip_record,
    kill_replica,
    object_storage,
    pause,
    poison_record,
)
from bench.chaos_plan import KINDS, Action, ChaosOptions, plan
from bench.chaos_progress import Progress
from bench.chaos_verify import expected_timestamps_ms, verify
from checkpoint.base import VideoState
from devkit.run_config import with_sections
from devkit.service_process import ServiceProcess
from devkit.service_run import ServiceRun
from devkit.services import moto_server
from devkit.stack import EmbeddedStack
from devkit.workload import SAMPLE_FPS, write_random_videos

log = logging.getLogger("bench.chaos")


async def run_chaos(options: ChaosOptions) -> dict[str, Any]:
    """The whole soak; returns the report (``report["ok"]``: every invariant held)."""
    started = time.monotonic()
    root = (options.workdir or Path(tempfile.mkdtemp(prefix="reelsense-chaos-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stack = EmbeddedStack(root, broker_on_s3=True)
    # The service's chunks and documents on an S3 endpoint of their own, which an outage
    # stops without stopping the broker's storage.
    objects = moto_server(root / "objects-moto") if options.outages else None
    await asyncio.to_thread(stack.start)
    try:
        async with ServiceRun(
            root,
            bootstrap=stack.bootstrap,
            redis_url=stack.redis_url,
            unique=f"chaos{options.seed}",
        ) as run:
            gate = None
            if objects is not None:
                await asyncio.to_thread(objects.start)
                gate = Gate(objects.port)
                await gate.open()
                run.configure(storage=object_storage(objects.port, gate))
            try:
                report = await _Soak(options, stack, run, gate).run()
            finally:
                if gate is not None:
                    await gate.shut()
    finally:
        if objects is not None:
            await asyncio.to_thread(objects.stop)
        await asyncio.to_thread(stack.stop)
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    report["ok"] = not report["failures"]
    if report["ok"] and options.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    else:
        report["workdir"] = str(root)
        (root / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


class _Soak:
    def __init__(
        self,
        options: ChaosOptions,
        stack: EmbeddedStack,
        run: ServiceRun,
        gate: Gate | None,
    ) -> None:
        self.options = options
        self.stack = stack
        self.service_run = run
        self.gate = gate  # in front of the object store, for its outages
        self.poisoned: list[str] = []
        self.videos: dict[str, Path] = {}
        self.rng = random.Random(options.seed)
        self.counts = dict.fromkeys(
            ("kills", "replica_kills", "broker_bounces", "redis_bounces", "rebalances"), 0
        ) | dict.fromkeys(("outages", "freezes", "poisons"), 0)
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
        )
        self.session_s = self.config.kafka.session_timeout_ms / 1000

    async def run(self) -> dict[str, Any]:
        options, run, config = self.options, self.service_run, self.config
        videos = await asyncio.to_thread(
            write_random_videos,
            run.videos_dir,
            options.videos,
            self.rng,
            seconds=(options.min_seconds, options.max_seconds),
        )
        expected = {
            v: expected_timestamps_ms(frames, SAMPLE_FPS, config.stages.sample_fps)
            for v, (_, frames) in videos.items()
        }
        chunks = {v: -(-len(times) // config.stages.chunk_frames) for v, times in expected.items()}
        self.videos = {v: videos[v][0] for v in sorted(videos)}
        run.start_process("a")
        await run.upload(self.videos)
        drip = DripSource()
        dripped = [f"drip-{i}" for i in range(options.drips)]
        await run.publish(drip_record(v, drip.url(v)) for v in dripped)
        tracker = Progress(run.store, chunks, self._restart_exited)
        poisoning = asyncio.create_task(self._poison())
        deadline = time.monotonic() + options.deadline_s()
        actions = plan(options, self.rng)
        planned = {kind: sum(1 for a in actions if a.kind == kind) for kind in KINDS}
        for action in actions:
            if not await tracker.reached(action.at, deadline):
                log.warning("the work ended before %s at %.2f", action.kind, action.at)
                break
            await asyncio.sleep(action.delay_s)
            log.info("%s at %.0f%% of the work", action.kind, 100 * tracker.share())
            await self._fire(action)
        settled = await tracker.settled(deadline)
        poisoning.cancel()
        await asyncio.gather(poisoning, return_exceptions=True)
        if self.side is not None:  # a freeze still under way ends now (SIGCONT)
            self.side.cancel()
            await asyncio.gather(self.side, return_exceptions=True)
        if dripped:
            with contextlib.suppress(AssertionError):
                await run.wait_final(dripped, timeout_s=max(5.0, deadline - time.monotonic()))
        drip.close()
        await run.receiver.wait_for_videos(sorted(videos) + dripped, timeout_s=60 if settled else 5)
        # Graceful: final commits, then the sinks are at rest. In a thread, so that the
        # receiver in this loop still answers deliveries made while the services drain.
        await asyncio.to_thread(run.stop_processes, timeout_s=120)
        hooks = run.receiver.requests
        if self.gate is not None:  # read the objects straight, not through this loop's gate
            endpoint = f"http://127.0.0.1:{self.gate.target_port}"
            config = with_sections(config, storage={"s3_endpoint_url": endpoint})
        report = await verify(
            config=config,
            expected=expected,
            store=run.store,
            hooks=[hook for hook in hooks if hook.video_id not in dripped],
        )
        hostile = await check_hostile(
            bootstrap=config.kafka.bootstrap,
            dead_letter_topic=config.kafka.dead_letter_topic,
            store=run.store,
            hooks=hooks,
            poisoned=self.poisoned,
            dripped=dripped,
        )
        report["failures"] += hostile.pop("failures")
        report.update(hostile)
        report.update(self.counts)
        report["planned"] = planned  # more than fired: the work ended first
        disruptions = sum(self.counts.values())
        report["disruptions"] = disruptions
        report["max_in_flight"] = config.kafka.max_in_flight
        report["redone_bound"] = disruptions * config.kafka.max_in_flight
        if report["redone_chunks"] > report["redone_bound"]:
            report["failures"].append("redone chunks above one per (disruption x video in flight)")
        report["unexpected_exits"] = self.unexpected_exits
        report["leave_exit_codes"] = self.leave_exit_codes
        if any(code != 0 for code in self.leave_exit_codes):
            report["failures"].append("a leaving service did not stop cleanly on SIGTERM")
        if self.unexpected_exits:
            report["failures"].append("a service exited on its own")
        report["start_s_mean"] = round(sum(self.start_s) / max(1, len(self.start_s)), 1)
        report["start_s_max"] = round(max(self.start_s, default=0.0), 1)
        report["seed"] = options.seed
        return report

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

    async def _poison(self) -> None:
        """Re-send ``poisons`` done videos' events with an unknown field, each as soon as a
        video not re-sent yet is done (beside the disruptions, whatever share they are at)."""
        run = self.service_run
        while len(self.poisoned) < self.options.poisons:
            for video_id in self.videos:
                if video_id in self.poisoned:
                    continue
                with contextlib.suppress(Exception):  # Redis may be down for a moment
                    status = await run.store.get(video_id)
                    if status and status.status is VideoState.DONE:
                        await run.publish([poison_record(video_id, self.videos[video_id])])
                        self.poisoned.append(video_id)
                        self.counts["poisons"] += 1
                        await asyncio.sleep(10.0)
                        break
            else:
                await asyncio.sleep(1.0)

    async def _healthy(self, name: str) -> None:
        """Waits for a started service's API; records how long the start took."""
        started = time.monotonic()
        try:
            await self.service_run.process(name).wait_healthy(timeout_s=300)
        except TimeoutError:
            log.warning("service %s is not healthy after 300 s", name)
            return
        self.start_s.append(time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--videos", type=int, default=12)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--replica-kills", type=int, default=None, help="default: kills/3, >=1")
    parser.add_argument("--broker-bounces", type=int, default=None, help="default: kills/5, >=1")
    parser.add_argument("--redis-bounces", type=int, default=None, help="default: kills/5, >=1")
    parser.add_argument("--no-rebalance", action="store_true", help="no second consumer")
    parser.add_argument("--outages", type=int, default=1, help="object-store outages")
    parser.add_argument("--outage-s", type=float, default=120.0)
    parser.add_argument("--freezes", type=int, default=1, help="of the joined process")
    parser.add_argument("--poisons", type=int, default=2, help="re-sends of done videos")
    parser.add_argument("--drips", type=int, default=1, help="sources dripping for ever")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--timeout-s", type=float)
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("aiokafka", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    options = ChaosOptions(
        videos=args.videos,
        kills=args.kills,
        replica_kills=_default(args.replica_kills, args.kills // 3),
        broker_bounces=_default(args.broker_bounces, args.kills // 5),
        redis_bounces=_default(args.redis_bounces, args.kills // 5),
        rebalance=not args.no_rebalance,
        outages=args.outages,
        outage_s=args.outage_s,
        freezes=args.freezes,
        poisons=args.poisons,
        drips=args.drips,
        seed=args.seed,
        workdir=args.workdir,
        timeout_s=args.timeout_s,
    )
    # SIGTERM as Ctrl-C: the run is cancelled and stops everything it started, by PID.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    report = asyncio.run(run_chaos(options))
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 0 if report["ok"] else 1


def _default(given: int | None, derived: int) -> int:
    return given if given is not None else max(1, derived)


if __name__ == "__main__":
    sys.exit(main())
