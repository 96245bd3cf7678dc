"""Prometheus metrics of the streaming runtime, and what feeds them.

Three places record:

- the orchestrating process (``PipelineMetrics``, called by ``VideoProcessor``): videos,
  chunks and frames in flight, per-stage round trips (throughput, latency, queue depth);
- every stage replica (``runtime.activity.StageActivity``): when it was working, on how many
  frames, and the CPU time of the threads that did the stage's work. Replicas live in other
  processes, so ``MetricsPoller`` collects their activity every few seconds and turns it into
  busy fractions and replica counts in the orchestrating process;
- the Kafka consumer: its own counters (``ConsumerStats``) and the group's lag, read by the
  poller.

Everything lands in prometheus_client's default registry; ``start_metrics_server`` serves it
over HTTP from the service process (the API replica serves its own process's registry). On a
Ray cluster the poller also copies the registry into Ray's metrics agent every round
(``runtime.ray_metrics``), where the node's metrics export port carries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server

from consumers.base import ConsumerStats
from core.config import KafkaSettings
from runtime.activity import ActivitySnapshot

log = logging.getLogger(__name__)


_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_VIDEO_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)

STAGE_FRAMES = Counter(
    "reelsense_stage_frames_total", "Frames a stage has finished (throughput).", ["stage"]
)
STAGE_CHUNKS = Counter(
    "reelsense_stage_chunks_total", "Chunks a stage has finished, by outcome.", ["stage", "outcome"]
)
STAGE_LATENCY = Histogram(
    "reelsense_stage_latency_seconds",
    "Round trip of one chunk through a stage, waiting in its queue included.",
    ["stage"],
    buckets=_LATENCY_BUCKETS,
)
STAGE_QUEUE = Gauge(
    "reelsense_stage_queue_depth", "Chunks sent to a stage and not back yet.", ["stage"]
)
STAGE_REPLICAS = Gauge("reelsense_stage_replicas", "Running replicas of a stage pool.", ["stage"])
STAGE_BUSY = Gauge(
    "reelsense_stage_busy_fraction",
    "Share of the last interval a stage's replicas spent working (mean over replicas).",
    ["stage"],
)
STAGE_BUSY_SECONDS = Counter(
    "reelsense_stage_busy_seconds_total", "Seconds stage replicas spent working.", ["stage"]
)
STAGE_CPU_SECONDS = Counter(
    "reelsense_stage_cpu_seconds_total",
    "CPU seconds of the threads doing stage work (the stage's own cost, not its replica's).",
    ["stage"],
)
VIDEOS_IN_FLIGHT = Gauge("reelsense_videos_in_flight", "Videos being processed now.")
CHUNKS_IN_FLIGHT = Gauge("reelsense_chunks_in_flight", "Decoded chunks not through every stage.")
FRAMES_IN_FLIGHT = Gauge("reelsense_frames_in_flight", "Decoded frames not through every stage.")
VIDEOS = Counter("reelsense_videos_total", "Videos finished, by outcome.", ["outcome"])
VIDEO_SECONDS = Histogram(
    "reelsense_video_seconds", "Processing time of one video.", buckets=_VIDEO_BUCKETS
)
CONSUMER_LAG = Gauge(
    "reelsense_consumer_lag", "Records of the topic the group has not committed.", ["partition"]
)
CONSUMER_IN_FLIGHT = Gauge("reelsense_consumer_in_flight", "Records being handled now.")
CONSUMER_IN_FLIGHT_BULK = Gauge(
    "reelsense_consumer_in_flight_bulk", "Of the records handled now, those of the bulk lane."
)
CONSUMER_PAUSED = Gauge("reelsense_consumer_paused_partitions", "Partitions paused while full.")
CONSUMER_REBALANCES = Counter("reelsense_consumer_rebalances_total", "Group rebalances seen.")
CONSUMER_RECORDS = Counter("reelsense_consumer_records_done_total", "Records durably handled.")


class PipelineMetrics:
    """What the orchestrating process records; stateless (the metrics are process-wide)."""

    def video_started(self) -> None:
        VIDEOS_IN_FLIGHT.inc()

    def video_finished(self, outcome: str, seconds: float) -> None:
        VIDEOS_IN_FLIGHT.dec()
        VIDEOS.labels(outcome).inc()
        if outcome == "done":
            VIDEO_SECONDS.observe(seconds)

    def chunk_started(self, frames: int) -> None:
        CHUNKS_IN_FLIGHT.inc()
        FRAMES_IN_FLIGHT.inc(frames)

    def chunk_finished(self, frames: int) -> None:
        CHUNKS_IN_FLIGHT.dec()
        FRAMES_IN_FLIGHT.dec(frames)

    def stage_sent(self, stage: str) -> None:
        STAGE_QUEUE.labels(stage).inc()

    def stage_returned(self, stage: str, frames: int, seconds: float, *, ok: bool) -> None:
        STAGE_QUEUE.labels(stage).dec()
        STAGE_CHUNKS.labels(stage, "ok" if ok else "error").inc()
        if ok:
            STAGE_FRAMES.labels(stage).inc(frames)
            STAGE_LATENCY.labels(stage).observe(seconds)


# -- collection in the orchestrating process -------------------------------------------------


@runtime_checkable
class ActivitySource(Protocol):
    async def activity(self) -> dict[str, list[ActivitySnapshot]]:
        """Stage -> a snapshot of each of its running replicas."""
        ...


class LagReader:
    """The group's lag per partition: end offset minus committed offset.

    Uses a client of its own that never joins the group (it only reads offsets), so reading
    lag cannot trigger a rebalance of the members doing the work.
    """

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._client: object | None = None

    async def read(self) -> dict[int, int]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        s = self._settings
        if self._client is None:
            client = AIOKafkaConsumer(
                bootstrap_servers=s.bootstrap,
                group_id=s.group_id,
                client_id=f"{s.client_id}-lag",
                enable_auto_commit=False,
                request_timeout_ms=s.request_timeout_ms,
            )
            await client.start()
            self._client = client
        client = self._client
        assert isinstance(client, AIOKafkaConsumer)
        partitions = [
            TopicPartition(s.topic, p) for p in client.partitions_for_topic(s.topic) or ()
        ]
        if not partitions:
            await client.force_metadata_update()
            return {}
        ends = await client.end_offsets(partitions)
        lag: dict[int, int] = {}
        for tp in partitions:
            committed = await client.committed(tp) or 0
            lag[tp.partition] = max(0, ends.get(tp, 0) - committed)
        return lag

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.stop()  # type: ignore[attr-defined]


class MetricsPoller:
    """Every ``interval_s``: replica activity -> busy fractions and replica counts; consumer
    counters and group lag -> gauges. Failures are logged and the next round tries again."""

    def __init__(
        self,
        *,
        interval_s: float,
        activity: ActivitySource | None = None,
        consumer_stats: Callable[[], ConsumerStats] | None = None,
        lag: LagReader | None = None,
        mirror: Callable[[], object] | None = None,
    ) -> None:
        """``mirror``: called after each round's readings (``runtime.ray_metrics``)."""
        self._interval_s = interval_s
        self._activity = activity
        self._consumer_stats = consumer_stats
        self._lag = lag
        self._mirror = mirror
        self._last: dict[tuple[str, str], ActivitySnapshot] = {}
        self._rebalances = 0
        self._records = 0
        self.rounds = 0

    async def run(self) -> None:
        try:
            while True:
                await self.poll_once()
                await asyncio.sleep(self._interval_s)
        finally:
            if self._lag is not None:
                with contextlib.suppress(Exception):
                    await self._lag.close()

    async def poll_once(self) -> None:
        for name, step in (
            ("activity", self._poll_activity),
            ("consumer", self._poll_consumer),
            ("lag", self._poll_lag),
            ("mirror", self._run_mirror),
        ):
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("metrics: reading %s failed: %s: %s", name, type(exc).__name__, exc)
        self.rounds += 1

    async def _run_mirror(self) -> None:
        if self._mirror is not None:
            self._mirror()

    async def _poll_activity(self) -> None:
        if self._activity is None:
            return
        by_stage = await self._activity.activity()
        for stage, snapshots in by_stage.items():
            STAGE_REPLICAS.labels(stage).set(len(snapshots))
            fractions = []
            for snap in snapshots:
                key = (stage, snap.replica)
                before = self._last.get(key)
                self._last[key] = snap
                if before is None or snap.busy_s < before.busy_s:  # new (or restarted) replica
                    STAGE_BUSY_SECONDS.labels(stage).inc(snap.busy_s)
                    STAGE_CPU_SECONDS.labels(stage).inc(snap.cpu_s)
                    continue
                STAGE_BUSY_SECONDS.labels(stage).inc(snap.busy_s - before.busy_s)
                STAGE_CPU_SECONDS.labels(stage).inc(max(0.0, snap.cpu_s - before.cpu_s))
                window = snap.taken_at - before.taken_at
                if window > 0:
                    fractions.append(min(1.0, (snap.busy_s - before.busy_s) / window))
            if fractions:
                STAGE_BUSY.labels(stage).set(sum(fractions) / len(fractions))

    async def _poll_consumer(self) -> None:
        if self._consumer_stats is None:
            return
        stats = self._consumer_stats()
        CONSUMER_IN_FLIGHT.set(stats.in_flight)
        CONSUMER_IN_FLIGHT_BULK.set(stats.in_flight_bulk)
        CONSUMER_PAUSED.set(stats.paused_partitions)
        if stats.rebalances > self._rebalances:
            CONSUMER_REBALANCES.inc(stats.rebalances - self._rebalances)
        if stats.records_done > self._records:
            CONSUMER_RECORDS.inc(stats.records_done - self._records)
        self._rebalances, self._records = stats.rebalances, stats.records_done

    async def _poll_lag(self) -> None:
        if self._lag is None:
            return
        for partition, lag in (await self._lag.read()).items():
            CONSUMER_LAG.labels(str(partition)).set(lag)


# -- HTTP exposure ---------------------------------------------------------------------------


class MetricsServer:
    """prometheus_client's HTTP server for the default registry, stoppable."""

    def __init__(self, host: str, port: int) -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=REGISTRY)
        self.host = host

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def start_metrics_server(host: str, port: int) -> MetricsServer:
    """Serve the default registry on ``host:port`` (port 0: any free port)."""
    server = MetricsServer(host, port)
    log.info("metrics on %s", server.url)
    return server


def sample_values(text: str) -> Mapping[str, float]:
    """``name{labels}`` -> value from a text exposition (for tests and the benchmark)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            values[name] = float(value)
    return values
