"""Crash soak: the service under kill -9, lost stage replicas, broker and Redis restarts and a
consumer joining and leaving, then an offline check that nothing was lost or doubled.

    python -m bench.soak.chaos --videos 50 --kills 20 --json chaos.json [--seed 7] [--workdir DIR]
        [--outages 1 --outage-s 120 --freezes 1 --poisons 2 --drips 1]
        [--dead-endpoint --replica-freezes 1 --writer-kills 1 --failovers 1 --denials 1]

Run from the repository root. Starts its own stack on 127.0.0.1 (moto as S3, Tansu storing
its log in that S3 so a restarted broker keeps every record and committed offset, redis-server
with AOF, a webhook receiver), writes ``--videos`` sample videos of 2-20 s with burned-in
text, runs ``reelsense serve`` as a subprocess with its own local Ray and publishes one event
per video. Disruptions fire at seeded moments, each once the service has got through a drawn
share of the work (so every one hits work in flight): kill -9 of the service with everything
it started (the next disruption waits until the restarted service answers again), SIGKILL of
one OCR Serve replica, a broker restart, a Redis SIGKILL and restart, and a second service
process that joins the consumer group and later leaves on SIGTERM. Hostile inputs and
outages come from ``bench.soak.chaos_faults``: poison re-sends of done videos, slow-drip sources,
an outage of the object store (its own moto, behind a gate that refuses connections for
minutes) and the joined process
frozen past its session and leases while it holds partitions; with the options of the second
line, one tenant's webhook endpoint that never answers (the other tenants' webhook delays are
reported, to set against a run without it), the OCR replica stopped by SIGSTOP, the sink
writer's replica killed, Redis run under Sentinel with its primary killed and failed over,
and the object store answering AccessDenied.
When every video is final, ``bench.soak.chaos_verify`` checks the sinks, the webhooks, the
checkpoints and the committed offsets. Exit code 1 when an invariant fails. Everything started
is stopped by PID, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.soak.chaos_disruptions import Disruptions
from bench.soak.chaos_faults import (
    DripSource,
    Gate,
    check_hostile,
    dead_endpoint_records,
    drip_record,
    object_storage,
    poison_record,
    webhook_delays,
)
from bench.soak.chaos_plan import KINDS, ChaosOptions, plan
from bench.soak.chaos_progress import Progress
from bench.soak.chaos_verify import expected_timestamps_ms, verify
from checkpoint.base import VideoState
from devkit.blackhole import Blackhole
from devkit.run_config import with_sections
from devkit.sentinel_redis import SentinelRedis
from devkit.service_run import ServiceRun
from devkit.services import moto_server
from devkit.stack import EmbeddedStack
from devkit.workload import SAMPLE_FPS, write_random_videos

log = logging.getLogger("bench.soak.chaos")


async def run_chaos(options: ChaosOptions) -> dict[str, Any]:
    """The whole soak; returns the report (``report["ok"]``: every invariant held)."""
    started = time.monotonic()
    root = (options.workdir or Path(tempfile.mkdtemp(prefix="reelsense-chaos-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stack = EmbeddedStack(root, broker_on_s3=True)
    # The service's chunks and documents on an S3 endpoint of their own, which an outage
    # stops without stopping the broker's storage.
    gated = options.outages or options.denials
    objects = moto_server(root / "objects-moto") if gated else None
    sentinel = SentinelRedis(root / "sentinel-redis") if options.failovers else None
    await asyncio.to_thread(stack.start)
    try:
        if sentinel is not None:
            await asyncio.to_thread(sentinel.start)
            await sentinel.replicating()
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
            if sentinel is not None:
                run.configure(redis=sentinel.settings())
            try:
                report = await _Soak(options, stack, run, gate, sentinel).run()
            finally:
                if gate is not None:
                    await gate.shut()
    finally:
        if objects is not None:
            await asyncio.to_thread(objects.stop)
        if sentinel is not None:
            await asyncio.to_thread(sentinel.stop)
        await asyncio.to_thread(stack.stop)
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    report["ok"] = not report["failures"]
    if report["ok"] and options.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    else:
        report["workdir"] = str(root)
        (root / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


class _Soak(Disruptions):
    def __init__(
        self,
        options: ChaosOptions,
        stack: EmbeddedStack,
        run: ServiceRun,
        gate: Gate | None,
        sentinel: SentinelRedis | None,
    ) -> None:
        super().__init__(options, stack, run, gate, sentinel)
        self.dead = Blackhole()  # tenant acme's callback, with ``dead_endpoint``
        self.poisoned: list[str] = []
        self.videos: dict[str, Path] = {}

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
        await self.dead.start()
        await run.publish(dead_endpoint_records(self.videos, self.dead, options.dead_endpoint))
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
        await self.dead.stop()
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
        report.update(await webhook_delays(run.store, hooks, set(self.videos)))
        report["dead_endpoint_connections"] = self.dead.accepted
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak.chaos", description=__doc__)
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
    parser.add_argument("--dead-endpoint", action="store_true", help="acme's callback hangs")
    parser.add_argument("--replica-freezes", type=int, default=0, help="OCR replica SIGSTOPs")
    parser.add_argument("--writer-kills", type=int, default=0, help="sink writer replica kills")
    parser.add_argument("--failovers", type=int, default=0, help="Redis failovers (Sentinel)")
    parser.add_argument("--denials", type=int, default=0, help="object store AccessDenied")
    parser.add_argument("--denial-s", type=float, default=30.0)
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
        dead_endpoint=args.dead_endpoint,
        replica_freezes=args.replica_freezes,
        writer_kills=args.writer_kills,
        failovers=args.failovers,
        denials=args.denials,
        denial_s=args.denial_s,
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
