"""Metrics: replica activity, the Prometheus endpoint over real HTTP, group lag on the real
broker, the whole service's metrics after real videos, and the decoder's bounded run-ahead."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from ray import serve

from checkpoint.base import VideoState
from consumers.admin import ensure_topics
from core.config import KafkaSettings
from core.records import LocalVideo, VideoRef
from devkit.service_run import ServiceRun
from devkit.services import free_port
from devkit.workload import publish, write_videos
from runtime.activity import StageActivity
from runtime.executor import ChunkTicket
from runtime.metrics import (
    LagReader,
    MetricsPoller,
    PipelineMetrics,
    sample_values,
    start_metrics_server,
)


def test_stage_activity_counts_overlapping_calls_once() -> None:
    activity = StageActivity("ocr", "r1", keep=2)
    with activity.working(3):
        time.sleep(0.05)
        with activity.working() as inner:
            inner.items = 2
            time.sleep(0.05)
    snap = activity.snapshot()
    assert snap.calls == 2
    assert snap.items == 5
    assert 0.09 <= snap.busy_s < 0.5  # the overlap is counted once, not twice
    assert [entry[0] for entry in snap.intervals] == [1, 2]
    with activity.working(1):
        pass
    later = activity.snapshot(since=2)
    assert [entry[0] for entry in later.intervals] == [3]  # only what came after
    assert len(activity.snapshot().intervals) == 2  # the ring keeps the newest


async def test_stage_activity_counts_the_cpu_of_the_working_thread_only() -> None:
    def spin(seconds: float) -> int:
        end, turns = time.thread_time() + seconds, 0
        while time.thread_time() < end:
            turns += 1
        return turns

    activity = StageActivity("ocr", "r1")
    with activity.working(1) as work:
        assert await work.in_thread(spin, 0.1) > 0
    with activity.working(1) as work:
        await work.in_thread(time.sleep, 0.3)  # waiting costs no CPU
    with pytest.raises(ZeroDivisionError), activity.working(1) as work:
        await work.in_thread(lambda: spin(0.05) // 0)  # a failed call's CPU counts too
    snap = activity.snapshot()
    assert 0.15 <= snap.cpu_s < 0.25
    assert snap.busy_s >= 0.45  # wall time: the sleep counts there


def test_stage_activity_counts_a_failed_call() -> None:
    activity = StageActivity("decode", "r1")
    with pytest.raises(ValueError, match="corrupt"), activity.working(4):
        raise ValueError("corrupt")
    snap = activity.snapshot()
    assert snap.calls == 1
    assert snap.busy_s >= 0


async def test_metrics_server_serves_recorded_values_over_http() -> None:
    server = start_metrics_server("127.0.0.1", 0)
    metrics = PipelineMetrics()
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            before = sample_values((await client.get(server.url)).text)
            metrics.video_started()
            metrics.chunk_started(8)
            metrics.stage_sent("ocr")
            mid = sample_values((await client.get(server.url)).text)
            metrics.stage_returned("ocr", 8, 0.3, ok=True)
            metrics.stage_sent("ocr")
            metrics.stage_returned("ocr", 8, 0.1, ok=False)
            metrics.chunk_finished(8)
            metrics.video_finished("done", 2.5)
            response = await client.get(server.url)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        after = sample_values(response.text)
    finally:
        server.stop()

    def delta(name: str, start: dict[str, float] = before) -> float:
        return after.get(name, 0.0) - start.get(name, 0.0)

    assert mid["reelsense_frames_in_flight"] - before.get("reelsense_frames_in_flight", 0) == 8
    assert mid['reelsense_stage_queue_depth{stage="ocr"}'] >= 1
    assert delta("reelsense_frames_in_flight") == 0
    assert delta("reelsense_videos_in_flight") == 0
    assert delta('reelsense_stage_frames_total{stage="ocr"}') == 8  # the failed call is not
    assert delta('reelsense_stage_chunks_total{outcome="error",stage="ocr"}') == 1
    assert delta('reelsense_stage_latency_seconds_count{stage="ocr"}') == 1
    assert delta('reelsense_videos_total{outcome="done"}') == 1
    assert delta("reelsense_video_seconds_count") == 1
    # Once stopped, nothing listens there any more.
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(timeout=2) as client:
            await client.get(server.url)


async def test_lag_reader_reports_uncommitted_records(kafka_bootstrap: str, unique: str) -> None:
    settings = KafkaSettings(
        bootstrap=kafka_bootstrap, topic=f"lag-{unique}", group_id=f"g-{unique}"
    )
    await ensure_topics(kafka_bootstrap, {settings.topic: 2})
    records = [(f"k{i}".encode(), b"{}") for i in range(6)]
    await publish(kafka_bootstrap, settings.topic, records)
    reader = LagReader(settings)
    try:
        lag = await reader.read()
        assert sum(lag.values()) == 6
        assert set(lag) == {0, 1}
        # A member of the group commits one partition to its end: that lag is gone.
        member = AIOKafkaConsumer(
            bootstrap_servers=kafka_bootstrap, group_id=settings.group_id, enable_auto_commit=False
        )
        await member.start()
        try:
            tp = TopicPartition(settings.topic, 0)
            member.assign([tp])
            end = (await member.end_offsets([tp]))[tp]
            await member.commit({tp: end})
        finally:
            await member.stop()
        lag = await reader.read()
        assert lag[0] == 0
        assert sum(lag.values()) == 6 - end
    finally:
        await reader.close()


async def test_poller_goes_on_when_the_broker_is_unreachable() -> None:
    dead = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", request_timeout_ms=1000)
    poller = MetricsPoller(interval_s=0.05, lag=LagReader(dead))
    await poller.poll_once()
    await poller.poll_once()
    assert poller.rounds == 2  # each round logged the failure and finished


@pytest.mark.slow
async def test_service_metrics_endpoint_after_real_videos(
    service_run: ServiceRun, serve_apps: None
) -> None:
    run = service_run
    config = run.configure(runtime={"metrics_port": 0, "metrics_interval_s": 0.5})
    videos = write_videos(run.videos_dir, 2)
    service = await run.start_in_process()
    try:
        assert service.metrics_url is not None
        async with httpx.AsyncClient(timeout=10) as client:
            before = sample_values((await client.get(service.metrics_url)).text)
            await run.upload(videos)
            statuses = await run.wait_final(sorted(videos), timeout_s=300)
            assert all(s.status is VideoState.DONE for s in statuses.values()), statuses
            frames = sum(s.frames for s in statuses.values())
            deadline = time.monotonic() + 30
            while True:  # until the poller has seen the finished work
                after = sample_values((await client.get(service.metrics_url)).text)
                lags = [v for k, v in after.items() if k.startswith("reelsense_consumer_lag{")]
                records = after.get("reelsense_consumer_records_done_total", 0) - before.get(
                    "reelsense_consumer_records_done_total", 0
                )
                if (lags and not any(lags) and records >= 2) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
    finally:
        await run.stop_in_process()
    # What the service deployed left with it: its API address is free for the next one.
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(timeout=10) as client:
            await client.get(f"http://127.0.0.1:{config.api.port}/healthz")

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta('reelsense_videos_total{outcome="done"}') == 2
    assert delta('reelsense_stage_frames_total{stage="ocr"}') == frames
    assert delta('reelsense_stage_frames_total{stage="embed"}') == frames
    for stage in ("decode", "ocr", "embed"):
        assert after[f'reelsense_stage_replicas{{stage="{stage}"}}'] == 1
        assert delta(f'reelsense_stage_busy_seconds_total{{stage="{stage}"}}') > 0
        # Concurrent calls (two videos decoding at once) may each keep a core busy.
        busy = delta(f'reelsense_stage_busy_seconds_total{{stage="{stage}"}}')
        assert 0 < delta(f'reelsense_stage_cpu_seconds_total{{stage="{stage}"}}') <= busy * 2 + 0.05
        assert 0 <= after[f'reelsense_stage_busy_fraction{{stage="{stage}"}}'] <= 1
    assert lags
    assert not any(lags)
    assert after["reelsense_videos_in_flight"] == before.get("reelsense_videos_in_flight", 0)
    assert after["reelsense_frames_in_flight"] == before.get("reelsense_frames_in_flight", 0)
    assert delta("reelsense_consumer_records_done_total") >= 2


@pytest.mark.slow
async def test_decoding_stays_a_few_chunks_ahead_of_the_caller(
    service_run: ServiceRun, serve_apps: None
) -> None:
    from runtime.pools.base import INGEST, POOLS_APP
    from runtime.pools.executor import RayExecutor

    config = service_run.configure(runtime={"decode_ahead_chunks": 2})
    # 12 s at 1 frame/s, 2 frames per chunk: 6 chunks.
    path = write_videos(service_run.videos_dir, 1, seconds_per_scene=6.0)["vid-00"]
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
    executor = await asyncio.to_thread(RayExecutor.deploy, config)
    ingest = serve.get_deployment_handle(INGEST, app_name=POOLS_APP)

    async def decode_calls() -> int:
        replies = await ingest.broadcast("activity").results_async()
        return sum(s.calls for reply in replies for s in reply if s.stage == "decode")

    try:
        start = await decode_calls()
        stream = executor.ingest(VideoRef(video_id="long", uri=path.resolve().as_uri()))
        assert isinstance(await anext(stream), LocalVideo)
        first = await anext(stream)
        assert isinstance(first, ChunkTicket)
        assert first.index == 0
        await asyncio.sleep(3.0)  # ample time to decode all 6 chunks, were it allowed
        # Two chunks decoded (the allowance): the one taken and one waiting to be taken.
        assert await decode_calls() - start == 2
        # Each chunk is released as soon as it is taken (as if its image stages were done):
        # the ingest replica then drops its pixels instead of holding every chunk of the video.
        tickets = [first]
        executor.release(first)
        async for item in stream:
            assert isinstance(item, ChunkTicket)
            tickets.append(item)
            executor.release(item)
        assert [t.index for t in tickets] == list(range(6))
        assert tickets[-1].last
        held = await ingest.broadcast("held").results_async()
        assert sum(held) <= config.runtime.decode_ahead_chunks + 1, held
    finally:
        await executor.close()
