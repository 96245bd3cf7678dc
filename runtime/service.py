"""One service process: consumer, orchestration, sink writer, notifier and API, wired together.

``ReelsenseService.run()`` runs until ``request_stop()`` (SIGTERM, Ctrl-C): it then stops
taking records, lets in-flight videos finish within ``runtime.drain_timeout_s`` (the rest are
left to a restart: their offsets are not committed), commits, leaves the group and stops.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING

from checkpoint.chunk_store import ChunkStore
from checkpoint.errors import VideoIdTaken
from checkpoint.redis_store import RedisCheckpointStore
from consumers.admin import ensure_topics, service_topics
from consumers.base import RecordInfo
from consumers.errors import InvalidEvent
from consumers.events import VideoDeleted, VideoUploaded
from consumers.kafka import KafkaVideoConsumer
from core.config import ServiceConfig
from core.records import VideoRef
from core.tasks import cancel_and_wait
from notify.delivery_log import RedisDeliveryLog
from notify.dispatcher import NotificationDispatcher
from notify.status_topic import StatusTopicPublisher
from notify.webhooks import WebhookSender
from runtime.deletion import VideoDeleter
from runtime.executor import StageExecutor
from runtime.metrics import (
    ActivitySource,
    LagReader,
    MetricsPoller,
    MetricsServer,
    start_metrics_server,
)
from runtime.placement import placed
from runtime.processor import VideoProcessor
from runtime.ray_metrics import ray_metrics_mirror
from runtime.results import LocalResults, ResultStore
from runtime.upkeep import Upkeep
from runtime.video_stages import VideoStages
from stages.pipeline import Pipeline
from storage.uri import object_store_from_uri

if TYPE_CHECKING:
    from api.process import ProcessApi

log = logging.getLogger(__name__)


class ReelsenseService:
    """The always-on service of one process."""

    def __init__(self, config: ServiceConfig, *, deploy: bool = True) -> None:
        """``deploy``: deploy the stage pools and the API on Ray Serve (a process of its own);
        otherwise use the pools already deployed (a consumer replica inside a RayService)."""
        self.config = config = placed(config)
        self._deploy = deploy
        self.pipeline = Pipeline.from_config(config)
        self.store = RedisCheckpointStore(config.redis)
        self._executor: StageExecutor | None = None
        self._video_stages = VideoStages(self.pipeline.video_stages)
        self._results: ResultStore | None = None
        self._consumer: KafkaVideoConsumer | None = None
        self._dispatcher: NotificationDispatcher | None = None
        self._delivery_log: RedisDeliveryLog | None = None
        self._upkeep: Upkeep | None = None
        self._metrics_server: MetricsServer | None = None
        self._api: ProcessApi | None = None  # the API, when this process serves it
        self.metrics_poller: MetricsPoller | None = None
        self._stopping = asyncio.Event()

    @property
    def pipeline_version(self) -> str:
        return self.pipeline.version

    async def start(self) -> None:
        """Deploy (or connect to) the stage pools and start every part but the consumer; a
        failed start leaves nothing of its own running."""
        try:
            await self._start()
        except BaseException:
            await self._shutdown()
            await self._close_delivery_log()
            raise

    async def _start(self) -> None:
        config = self.config
        # First: a Redis that cannot confirm a final transition on disk is refused before
        # anything else starts (``CheckpointNotDurable``), see checkpoint/durability.py.
        await self.store.check_durability()
        await ensure_topics(
            config.kafka.bootstrap,
            service_topics(config.kafka),
            replication_factor=config.kafka.replication_factor,
        )
        if self.stopping:  # asked to stop while starting: nothing more is started
            return
        executor = await asyncio.to_thread(self._build_executor)
        self._executor = executor
        results = await asyncio.to_thread(self._build_results)
        self._results = results
        if self.stopping:
            return
        chunks = ChunkStore(object_store_from_uri(config.storage.object_store_uri, config.storage))
        processor = VideoProcessor(
            store=self.store,
            executor=executor,
            results=results,
            chunks=chunks,
            lineage=self.pipeline.lineage,
            settings=config.runtime,
            quiet_lanes=config.backfill.quiet_lanes,
            video_stages=self._video_stages,
        )
        deleter = VideoDeleter(self.store, results, chunks, self.pipeline.version)
        self._consumer = KafkaVideoConsumer(config.kafka, _Handler(processor, deleter))
        self._delivery_log = RedisDeliveryLog.from_settings(config.redis, config.notify)
        self._dispatcher = NotificationDispatcher(
            self.store,
            WebhookSender(config.notify),
            StatusTopicPublisher(config.kafka),
            config.notify,
            consumer_name=config.notify.consumer_name or socket.gethostname(),
            delivery_log=self._delivery_log,
        )
        self._upkeep = Upkeep(self.store, config, delivery_log=self._delivery_log, chunks=chunks)
        runtime = config.runtime
        self.metrics_poller = MetricsPoller(
            interval_s=runtime.metrics_interval_s,
            activity=executor if isinstance(executor, ActivitySource) else None,
            consumer_stats=self._consumer.stats,
            lag=LagReader(config.kafka),
            mirror=ray_metrics_mirror(config),  # on a Ray cluster: into the node's agent
        )
        if runtime.metrics_port is not None:
            self._metrics_server = start_metrics_server(runtime.metrics_host, runtime.metrics_port)
        if self._api_in_process:  # last, as on Serve: /healthz answers once all is up
            from api.process import ProcessApi

            self._api = ProcessApi(config)
            await self._api.start()
        log.info("service ready, pipeline %s", self.pipeline_version)

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus endpoint of this process, when ``runtime.metrics_port`` is set."""
        return self._metrics_server.url if self._metrics_server is not None else None

    @property
    def _api_in_process(self) -> bool:
        """Whether this process serves the API (see ``ApiSettings.in_service_process``)."""
        api = self.config.api
        if not self._deploy or self.config.runtime.executor != "ray":
            return False
        return (
            api.in_service_process
            if api.in_service_process is not None
            else (self.config.ray.address is None)
        )

    def _build_executor(self) -> StageExecutor:
        if self.config.runtime.executor == "local":
            from runtime.local_executor import LocalExecutor

            return LocalExecutor(self.config)
        from ray import serve

        from api.serve import deploy_api
        from runtime.pools.executor import RayExecutor

        if not self._deploy:
            return RayExecutor.connect(self.config)
        if self._api_in_process:
            serve.start(proxy_location="Disabled")  # nothing of Serve's is served over HTTP
            return self._pools()
        serve.start(http_options={"host": self.config.api.host, "port": self.config.api.port})
        executor = self._pools()
        deploy_api(self.config)
        return executor

    def _build_results(self) -> ResultStore:
        """The stored results: the one writer in this process, or the pools' writer replica
        (running once ``_build_executor`` returned)."""
        if self.config.runtime.executor == "local":
            return LocalResults(self.config)
        from runtime.pools.results import RayResults

        return RayResults.connect(self.config)

    def _pools(self) -> StageExecutor:
        """The stage pools: on a cluster the cluster's, shared by every process of the same
        config and deployed once for them all (``runtime.cluster.ensure_pools``); on a local
        Ray this process's own."""
        from runtime.pools.executor import RayExecutor

        if self.config.ray.address is None:
            return RayExecutor.deploy(self.config)
        from runtime.cluster import ensure_pools

        ensure_pools(self.config)
        return RayExecutor.connect(self.config)

    async def run(self) -> None:
        """Start (if needed) and serve until ``request_stop()``; a stop requested while
        starting ends the start between its steps, and nothing is consumed."""
        if self._consumer is None:
            await self.start()
        if self.stopping:
            await self._shutdown()
            await self._close_delivery_log()
            return
        assert self._consumer is not None
        assert self._dispatcher is not None
        assert self.metrics_poller is not None
        consumer = asyncio.create_task(self._consumer.run(), name="consumer")
        notifier = asyncio.create_task(self._dispatcher.run(), name="notifier")
        stop = asyncio.create_task(self._stopping.wait(), name="stop")
        metrics = asyncio.create_task(self.metrics_poller.run(), name="metrics")
        assert self._upkeep is not None
        sweeping = asyncio.create_task(self._upkeep.run(self._stopping), name="upkeep")
        done, _ = await asyncio.wait(
            {consumer, notifier, stop}, return_when=asyncio.FIRST_COMPLETED
        )
        await cancel_and_wait(metrics, sweeping)
        await self._shutdown()
        try:
            for task in (consumer, notifier):
                if task in done and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            await asyncio.gather(consumer, notifier, return_exceptions=True)
        finally:
            stop.cancel()
            await self._close_delivery_log()  # once the notifier, its user, has ended

    async def _close_delivery_log(self) -> None:
        delivery_log, self._delivery_log = self._delivery_log, None
        if delivery_log is not None:
            await delivery_log.close()

    def request_stop(self) -> None:
        """Call on the service's loop (``loop.call_soon_threadsafe`` from elsewhere, a signal
        handler included: see ``runtime.stop_signals``)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def _shutdown(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._dispatcher is not None:
            await self._dispatcher.stop()
        await self._video_stages.close()
        if self._executor is not None:
            await self._executor.close()
            if self._results is not None:  # built after the executor
                await self._results.close()
            # On a cluster the pools stay: they are the cluster's, other processes use them.
            local_ray = self.config.ray.address is None
            if self._deploy and self.config.runtime.executor == "ray" and local_ray:
                await _undeploy_within(_UNDEPLOY_WAIT_S)
        if self._metrics_server is not None:
            self._metrics_server.stop()
            self._metrics_server = None
        if self._api is not None:  # last: progress queries answer while videos drain
            await self._api.stop()
            self._api = None
        await self.store.close()


# Deleting the applications takes a second or two; a Ray whose GCS stopped answering (it was
# stopped with this process's group) would hold the call until Ray's core worker ends the
# process 60 s later, with nothing else stopped.
_UNDEPLOY_WAIT_S = 15.0


async def _undeploy_within(timeout_s: float) -> None:
    """``_undeploy`` on a thread of its own, waited for ``timeout_s`` at most: a daemon
    thread, so a call Ray never answers does not hold the process's exit either."""
    finished: Future[None] = Future()

    def undeploy() -> None:
        try:
            _undeploy()
        except Exception as exc:
            finished.set_exception(exc)
        else:
            finished.set_result(None)

    threading.Thread(target=undeploy, name="undeploy", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(finished)), timeout_s)
    except TimeoutError:
        log.warning("Serve did not answer within %.0f s; its applications go with Ray", timeout_s)


def _undeploy() -> None:
    """On a local Ray, what this process deployed on Serve goes with it; Serve itself too when
    nothing else runs on it, so the next process starts it afresh (its own HTTP address). (On
    a cluster nothing goes: the pools and the API are the cluster's, shared by its processes.)

    On a local Ray that ends with this process, Serve ends with Ray: stopping it first would
    print a line per call still waiting on Serve's controller (Ray reports those as failed
    tasks to be retried) with nothing wrong.
    """
    from ray import serve

    from api.serve import API_APP
    from runtime.cluster import ray_ends_with_this_process
    from runtime.pools.base import POOLS_APP

    serve_log = logging.getLogger("ray.serve")
    level = serve_log.level
    serve_log.setLevel(logging.WARNING)  # not a line per deleted application on every stop
    try:
        running = serve.status().applications
        for name in (API_APP, POOLS_APP):
            if name in running:
                serve.delete(name)
        if not serve.status().applications and not ray_ends_with_this_process():
            serve.shutdown()
    finally:
        serve_log.setLevel(level)


class _Handler:
    """Adapts the consumer's callbacks to the processor and the deleter."""

    def __init__(self, processor: VideoProcessor, deleter: VideoDeleter) -> None:
        self._processor = processor
        self._deleter = deleter

    async def handle(self, event: VideoUploaded, record: RecordInfo) -> None:
        try:
            ref = replace(event.to_ref(), lane=record.lane, sent_ms=record.timestamp)
            await self._processor.process(ref)
        except VideoIdTaken as taken:
            # Another tenant's video: its record stays as it is, this event is dead-lettered.
            raise InvalidEvent(str(taken), code=taken.code) from taken

    async def delete(self, event: VideoDeleted, record: RecordInfo) -> None:
        try:
            await self._deleter.delete(
                event.video_id, tenant=event.tenant, asked_ms=record.timestamp, reason=event.reason
            )
        except VideoIdTaken as taken:  # another tenant's video: refused, dead-lettered
            raise InvalidEvent(str(taken), code=taken.code, video_id=None) from taken

    async def reject(self, error: InvalidEvent, record: RecordInfo) -> None:
        # The consumer has logged it at WARNING already: one line per invalid event.
        log.debug("invalid event at %s: %s: %s", record, error.code, error)
        if error.video_id is not None:
            tenant = error.tenant or VideoRef.tenant
            ref = VideoRef(video_id=error.video_id, uri="", tenant=tenant, lane=record.lane)
            await self._processor.reject(ref, error)
