"""The Lua scripts of the Redis checkpoint store and the format of what they write.

Key layout (``P`` is ``RedisSettings.key_prefix``)::

    P:video:{video_id}                  hash    the record (fields below)
    P:idx:all                           zset    every video, scored by updated time (µs)
    P:idx:status:{status}               zset    per status
    P:idx:tenant:{tenant}               zset    per tenant
    P:idx:tenant:{tenant}:status:{s}    zset    per (tenant, status)
    P:idx:review:{decision}             zset    the review queue (``review``, ``block``), every
                                                tenant's, scored by done time (µs)
    P:idx:tenant:{tenant}:review:{d}    zset    one tenant's review queue of decision d
    P:review:audit                      stream  every reviewer's verdict, never trimmed
    P:progress                          channel live progress events (JSON)
    P:progress:stream                   stream  the same events, capped with MAXLEN ~
    P:outbox                            stream  outbox entries (field ``event``: OutboxEvent JSON)
    P:outbox:dead                       stream  outbox entries that could not be decoded
    P:durable                           counter a barrier write WAITAOF waits for (durability.py)

Record fields: ``video_id tenant uri status pipeline_version stage attempts epoch frames
error_code error_message timings`` (JSON), ``event`` (what ``ref_json`` keeps of the event that
made the record), ``swept_at`` (when the sweeper last sent that event through again, µs),
``owner lease_until`` (the instance running the attempt and, in server milliseconds, until when
its lease holds; 0: none), ``review`` (a done record's review decision: ``pass``, ``review`` or
``block``; absent where the review stage did not run) with ``review_summary`` (JSON: the
decision and each category's score, decision and findings), ``verdicts`` (JSON: the reviewers'
verdicts, oldest first, at most one per pipeline version; kept across versions) and
``created_at updated_at started_at finished_at`` (Redis server time, µs since the epoch); stage
progress is flattened as ``sd:{stage}`` (chunks done), ``st:{stage}`` (total, once known) and
``sn:{stage}`` (present while the stage has nothing to do for the video: not applicable;
records written before it existed read as applicable).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

from checkpoint.base import ProgressEvent, StageProgress, VideoState, VideoStatus
from core.records import VideoRef

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SCRIPTS = (
    "mark_queued",
    "claim",
    "renew",
    "advance",
    "mark_chunk",
    "mark_done",
    "mark_failed",
    "give_back",
    "mark_deleted",
    "review_verdict",
)


def load_script(name: str, *, alone: bool = False) -> str:
    """The Lua source of one transition: the shared head, then the script itself; ``alone``:
    a script that touches no record (the outbox's), without the head."""
    package = resources.files("checkpoint")
    body = package.joinpath(f"redis_{name}.lua").read_text(encoding="utf-8")
    if alone:
        return body
    return package.joinpath("redis_lib.lua").read_text(encoding="utf-8") + "\n" + body


def ref_json(ref: VideoRef) -> str:
    """What a record keeps of the event that made it (``event``): enough to send it again."""
    return json.dumps(
        {
            "video_id": ref.video_id,
            "uri": ref.uri,
            "tenant": ref.tenant,
            "callback_url": ref.callback_url,
            "metadata": ref.metadata,
            "lane": ref.lane,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def ref_from_json(data: str) -> VideoRef:
    raw = json.loads(data)
    return VideoRef(
        video_id=str(raw["video_id"]),
        uri=str(raw["uri"]),
        tenant=str(raw["tenant"]),
        callback_url=raw.get("callback_url"),
        metadata=dict(raw.get("metadata") or {}),
        lane=str(raw.get("lane") or "fresh"),
    )


def _time(value: str | None) -> datetime | None:
    return None if not value else EPOCH + timedelta(microseconds=int(value))


def fields_from_pairs(flat: list[Any]) -> dict[str, str]:
    """A script's HGETALL reply (a flat list) as a mapping."""
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}


def record_from_fields(fields: Mapping[str, str]) -> VideoStatus:
    """The record hash as a ``VideoStatus`` with timezone-aware (UTC) times."""
    stages: dict[str, StageProgress] = {}
    for name, value in fields.items():
        if name.startswith(("sd:", "st:", "sn:")):
            progress = stages.setdefault(name[3:], StageProgress())
            if name.startswith("sd:"):
                progress.done = int(value)
            elif name.startswith("st:"):
                progress.total = int(value)
            else:
                progress.applicable = False
    return VideoStatus(
        video_id=fields["video_id"],
        tenant=fields.get("tenant", "default"),
        uri=fields.get("uri", ""),
        status=VideoState(fields["status"]),
        pipeline_version=fields.get("pipeline_version", ""),
        stage=fields.get("stage") or None,
        stages=stages,
        attempts=int(fields.get("attempts", 0)),
        epoch=int(fields.get("epoch", 0)),
        frames=int(fields.get("frames", 0)),
        chunks_total=int(fields["chunks_total"]) if fields.get("chunks_total") else None,
        chunks_processed=int(fields.get("chunks_processed", 0)),
        chunks_restored=int(fields.get("chunks_restored", 0)),
        owner=fields.get("owner") or None,
        lane=fields.get("lane") or "fresh",
        error_code=fields.get("error_code"),
        error_message=fields.get("error_message"),
        timings=json.loads(fields["timings"]) if fields.get("timings") else {},
        created_at=_time(fields.get("created_at")),
        updated_at=_time(fields.get("updated_at")),
        started_at=_time(fields.get("started_at")),
        finished_at=_time(fields.get("finished_at")),
    )


def progress_from_json(data: str) -> ProgressEvent:
    """A progress event as the scripts publish it (``at`` in µs since the epoch)."""
    raw = json.loads(data)
    return ProgressEvent(
        video_id=raw["video_id"],
        tenant=raw["tenant"],
        status=VideoState(raw["status"]),
        stage=raw.get("stage"),
        done=int(raw.get("done") or 0),
        total=None if raw.get("total") is None else int(raw["total"]),
        at=EPOCH + timedelta(microseconds=int(raw["at"])),
        applicable=raw.get("applicable") is not False,  # events before it: applicable
    )
