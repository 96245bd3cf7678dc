"""The offline check after a crash soak: every video done exactly once in every sink.

Reads what the service left behind once it is stopped: the Lance ``frames`` and ``videos``
tables, the result documents and persisted chunk outputs in the object store, the webhooks the
receiver got, the checkpoint records in Redis and the committed Kafka offsets. Ground truth for
the frames is computed from the videos themselves (constant frame rate, known frame count), so
a resumed video that skipped or repeated a chunk shows up even when its checkpoint agrees.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import lance

from checkpoint.base import CheckpointStore, VideoState, VideoStatus
from core.config import ServiceConfig
from devkit.receiver import ReceivedWebhook
from devkit.workload import committed_and_end, end_offsets_by_reading
from storage.uri import object_store_from_uri

EPSILON_S = 1e-3  # the decoder's slack when a frame time meets a sampling slot
DONE_EVENT = "video.done"


def expected_timestamps_ms(frames: int, video_fps: int, sample_fps: float) -> list[int]:
    """Sample times (ms) of a constant-rate video of ``frames`` frames: the first frame at or
    after each slot of ``1 / sample_fps`` seconds, as the decoder takes them."""
    interval = 1.0 / sample_fps
    next_slot = 0.0
    out: list[int] = []
    for k in range(frames):
        t = k / video_fps
        if t + EPSILON_S < next_slot:
            continue
        next_slot = (math.floor((t + EPSILON_S) / interval) + 1) * interval
        out.append(round(t * 1000))
    return out


def webhook_id(video_id: str, kind: str, pipeline_version: str) -> str:
    """The id a delivery must carry (the same derivation as ``OutboxEvent.webhook_id``)."""
    digest = hashlib.sha256(f"{video_id}\x00{kind}\x00{pipeline_version}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


def _table(root: str, name: str, columns: list[str]) -> dict[str, list[Any]]:
    path = f"{root.rstrip('/')}/{name}.lance"
    if not Path(path).exists():
        return {column: [] for column in columns}
    table: dict[str, list[Any]] = lance.dataset(path).to_table(columns=columns).to_pydict()
    return table


def check_frames(
    lance_root: str, expected: dict[str, list[int]]
) -> tuple[dict[str, Any], Counter[str]]:
    """Rows of ``frames`` against the expected sample times; returns figures, rows per video."""
    table = _table(lance_root, "frames", ["video_id", "timestamp_ms", "ocr_text"])
    keys = Counter(zip(table["video_id"], table["timestamp_ms"], strict=True))
    per_video: Counter[str] = Counter(video_id for video_id, _ in keys.elements())
    present: dict[str, set[int]] = defaultdict(set)
    for video_id, timestamp in keys:
        present[video_id].add(timestamp)
    missing = sum(len(set(times) - present[v]) for v, times in expected.items())
    unexpected = sum(len(present[v] - set(times)) for v, times in expected.items())
    strangers = sorted(set(present) - set(expected))
    figures = {
        "rows": sum(keys.values()),
        "missing_rows": missing,
        "duplicate_rows": sum(n - 1 for n in keys.values() if n > 1),
        "unexpected_rows": unexpected + sum(len(present[v]) for v in strangers),
        "rows_without_text": sum(1 for text in table["ocr_text"] if not text),
    }
    return figures, per_video


def check_videos_table(lance_root: str, statuses: dict[str, VideoStatus]) -> dict[str, Any]:
    table = _table(lance_root, "videos", ["video_id", "pipeline_version", "frames"])
    rows = Counter(table["video_id"])
    mismatched = [
        video_id
        for video_id, version, frames in zip(
            table["video_id"], table["pipeline_version"], table["frames"], strict=True
        )
        if video_id in statuses
        and (version != statuses[video_id].pipeline_version or frames != statuses[video_id].frames)
    ]
    return {
        "video_rows_missing": sum(1 for v in statuses if rows[v] == 0),
        "video_rows_duplicate": sum(n - 1 for n in rows.values() if n > 1),
        "video_rows_mismatched": sorted(mismatched),
    }


def check_objects(config: ServiceConfig, ids: Collection[str]) -> dict[str, Any]:
    """One result document per video of ``ids``; no persisted chunk outputs left over."""
    store = object_store_from_uri(config.storage.object_store_uri, config.storage)
    try:
        documents: Counter[str] = Counter()
        for key in store.list("results/"):
            parts = key.split("/")  # results/{tenant}/{video_id}/{version}.json
            if len(parts) == 4:
                documents[parts[2]] += 1
        leftover = store.list("chunks/")
    finally:
        store.close()
    return {
        "documents_missing": sorted(v for v in ids if documents[v] == 0),
        "documents_extra": sum(n - 1 for n in documents.values() if n > 1),
        "leftover_chunk_objects": len(leftover),
    }


def check_webhooks(
    hooks: Sequence[ReceivedWebhook], ids: Sequence[str], version: str
) -> dict[str, Any]:
    """One id per (video, event type), the deterministic one; a done delivery for each."""
    by_event: dict[tuple[str, str], set[str]] = defaultdict(set)
    for hook in hooks:
        by_event[(hook.video_id, hook.type)].add(hook.webhook_id)
    delivered = {video_id for (video_id, kind) in by_event if kind == DONE_EVENT}
    wrong_ids = [
        (video_id, kind)
        for (video_id, kind), seen in by_event.items()
        if seen != {webhook_id(video_id, kind, version)}
    ]
    return {
        "webhook_deliveries": len(hooks),
        "repeat_deliveries": len(hooks) - sum(len(seen) for seen in by_event.values()),
        "lost_webhooks": sum(1 for v in ids if v not in delivered),
        "duplicate_webhook_ids": sum(len(seen) - 1 for seen in by_event.values()),
        "unverified_webhooks": sum(1 for hook in hooks if not hook.verified),
        "failed_webhooks": sum(1 for (_, kind) in by_event if kind != DONE_EVENT),
        "webhooks_with_wrong_id": len(wrong_ids),
    }


async def read_statuses(store: CheckpointStore, ids: Sequence[str]) -> dict[str, VideoStatus]:
    found = {}
    for video_id in ids:
        status = await store.get(video_id)
        if status is not None:
            found[video_id] = status
    return found


async def verify(
    *,
    config: ServiceConfig,
    expected: dict[str, list[int]],
    store: CheckpointStore,
    hooks: Sequence[ReceivedWebhook],
) -> dict[str, Any]:
    """Every figure of the soak's report and ``failures``: the invariants that did not hold.
    ``expected``: video id -> the sample times (ms) its frames must have."""
    ids = sorted(expected)
    statuses = await read_statuses(store, ids)
    done = {v: s for v, s in statuses.items() if s.status is VideoState.DONE}
    versions = {s.pipeline_version for s in done.values()}
    version = next(iter(versions)) if len(versions) == 1 else ""
    report: dict[str, Any] = {"videos": len(ids), "videos_done": len(done)}
    report["videos_failed"] = sorted(
        f"{v}: {s.error_code}" for v, s in statuses.items() if s.status is VideoState.FAILED
    )
    report["records_missing"] = sorted(set(ids) - set(statuses))
    frames, rows = check_frames(config.storage.lance_uri, expected)
    report.update(frames)
    report["checkpoint_mismatches"] = sorted(
        v for v, s in done.items() if s.frames != rows[v] or s.frames != len(expected[v])
    )
    report.update(check_videos_table(config.storage.lance_uri, done))
    report.update(check_objects(config, done))
    report.update(check_webhooks(hooks, ids, version))
    report.update(redone(done))
    committed, _ = await committed_and_end(
        config.kafka.bootstrap, config.kafka.topic, config.kafka.group_id
    )
    ends = await end_offsets_by_reading(config.kafka.bootstrap, config.kafka.topic)
    report["uncommitted_records"] = sum(
        max(0, end - committed.get(p, 0)) for p, end in ends.items()
    )
    report["failures"] = failures(report, versions)
    return report


def redone(done: dict[str, VideoStatus]) -> dict[str, Any]:
    """Chunks computed more than once (chunks_processed - chunks_total), summed."""
    known = [s for s in done.values() if s.chunks_total is not None]
    return {
        "redone_chunks": sum(max(0, s.chunks_processed - (s.chunks_total or 0)) for s in known),
        "restored_chunks": sum(s.chunks_restored for s in known),
        "chunks_total": sum(s.chunks_total or 0 for s in known),
        "videos_without_chunk_counts": len(done) - len(known),
    }


def failures(report: dict[str, Any], versions: set[str]) -> list[str]:
    """The invariants that did not hold, in words."""
    checks = {
        "not every video is done": report["videos_done"] != report["videos"],
        "done under more than one pipeline version": len(versions) > 1,
        "missing frame rows": report["missing_rows"] > 0,
        "duplicate frame rows": report["duplicate_rows"] > 0,
        "frame rows at unexpected times": report["unexpected_rows"] > 0,
        "checkpoint frames disagree with the sinks": bool(report["checkpoint_mismatches"]),
        "videos table: a video missing": report["video_rows_missing"] > 0,
        "videos table: duplicate rows": report["video_rows_duplicate"] > 0,
        "videos table disagrees with the checkpoint": bool(report["video_rows_mismatched"]),
        "result document missing": bool(report["documents_missing"]),
        "more than one result document for a video": report["documents_extra"] > 0,
        "persisted chunk outputs left over": report["leftover_chunk_objects"] > 0,
        "lost webhooks": report["lost_webhooks"] > 0,
        "more than one webhook id for one (video, event)": report["duplicate_webhook_ids"] > 0,
        "a webhook id is not the deterministic one": report["webhooks_with_wrong_id"] > 0,
        "a webhook failed verification": report["unverified_webhooks"] > 0,
        "a video.failed webhook was sent": report["failed_webhooks"] > 0,
        "uncommitted records": report["uncommitted_records"] > 0,
    }
    return [name for name, failed in checks.items() if failed]
