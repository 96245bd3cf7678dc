"""What the crash soak (``bench.soak.chaos``) does and when: its options, and the disruptions drawn
from a seed, each at a share of the work done."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ChaosOptions:
    videos: int = 12
    kills: int = 3
    replica_kills: int = 1
    broker_bounces: int = 1
    redis_bounces: int = 1
    rebalance: bool = True  # a second consumer process joins, then leaves
    outages: int = 0  # object-store outages of ``outage_s`` each
    outage_s: float = 120.0
    freezes: int = 0  # the joined process frozen past its session (needs ``rebalance``)
    poisons: int = 0  # re-sends of done videos with an unknown field
    drips: int = 0  # videos whose source drips a byte every half second
    dead_endpoint: bool = False  # tenant acme's callback URL takes connections, never answers
    replica_freezes: int = 0  # the OCR replica stopped (SIGSTOP) for replica_freeze_s
    replica_freeze_s: float = 40.0
    writer_kills: int = 0  # the sink writer's replica killed
    failovers: int = 0  # Redis under Sentinel, its primary killed (-9) and failed over
    denials: int = 0  # the object store answering AccessDenied for denial_s
    denial_s: float = 30.0
    seed: int = 1
    workdir: Path | None = None
    timeout_s: float | None = None  # for every video to become final; None: from the load
    min_seconds: float = 2.0
    max_seconds: float = 20.0

    def deadline_s(self) -> float:
        return self.timeout_s or 300 + 90 * (self.kills + 2) + 15 * self.videos


KINDS = (
    "kill",
    "replica",
    "broker",
    "redis",
    "outage",
    "join",
    "leave",
    "freeze_replica",
    "writer",
    "failover",
    "denial",
)


@dataclass(frozen=True)
class Action:
    kind: str  # one of KINDS
    at: float  # share of all chunks done that triggers it
    delay_s: float  # then this long before it fires


def plan(options: ChaosOptions, rng: random.Random) -> list[Action]:
    """Disruptions at seeded shares of the work, spread over its first 75%; the second
    consumer joins after them and stays briefly, or joins halfway when it is to freeze. (While
    it starts, and while it works alone during a restart of the first, the work races ahead:
    earlier, it would leave the planned disruptions nothing to hit.)"""

    def draw(kind: str, low: float = 0.03, high: float = 0.75) -> Action:
        return Action(kind, rng.uniform(low, high), rng.uniform(0.0, 3.0))

    actions = [draw("kill") for _ in range(options.kills)]
    actions += [draw("replica") for _ in range(options.replica_kills)]
    actions += [draw("broker") for _ in range(options.broker_bounces)]
    if not options.failovers:  # under Sentinel a Redis restart is a failover
        actions += [draw("redis") for _ in range(options.redis_bounces)]
    actions += [draw("outage", 0.2, 0.6) for _ in range(options.outages)]
    actions += [draw("freeze_replica") for _ in range(options.replica_freezes)]
    actions += [draw("writer") for _ in range(options.writer_kills)]
    actions += [draw("failover") for _ in range(options.failovers)]
    actions += [draw("denial", 0.2, 0.6) for _ in range(options.denials)]
    if options.rebalance and options.freezes:
        # Earlier, so that b still holds videos in flight when it freezes (the join freezes
        # it, beside the disruptions that follow).
        join = draw("join", 0.3, 0.4)
        actions += [join, draw("leave", join.at + 0.25, join.at + 0.3)]
    elif options.rebalance:
        join = draw("join", 0.72, 0.8)
        actions += [join, draw("leave", join.at + 0.03, join.at + 0.1)]
    return sorted(actions, key=lambda a: a.at)
