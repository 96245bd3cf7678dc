"""A backfill through the service: each video's upload event to the bulk lane.

The service takes bulk events only in the room fresh uploads leave (``consumers.lanes``) and
skips a video already done with its pipeline version, so sending the same backfill again costs
only the events. Events are sent with ``acks=all``, a window of them in flight at once; the
summary says how many went and what was skipped, and why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from backfill.sources import BackfillItem, Skipped

_WINDOW = 256  # events awaiting their acknowledgement at once


@dataclass
class Summary:
    sent: int = 0
    skipped: list[Skipped] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "skipped": len(self.skipped),
            "skipped_entries": [{"where": s.where, "reason": s.reason} for s in self.skipped],
        }


def select(
    entries: Iterable[BackfillItem | Skipped], limit: int | None = None
) -> tuple[list[BackfillItem], list[Skipped]]:
    """The items to send, at most ``limit``, each id once (its first entry), and the entries
    skipped, with why."""
    items: list[BackfillItem] = []
    skipped: list[Skipped] = []
    seen: dict[str, str] = {}
    for entry in entries:
        if isinstance(entry, Skipped):
            skipped.append(entry)
            continue
        video_id = entry.event.video_id
        if video_id in seen:
            reason = f"id {video_id} already sent from {seen[video_id]}"
            skipped.append(Skipped(entry.where, reason))
            continue
        if limit is not None and len(items) >= limit:
            break
        seen[video_id] = entry.where
        items.append(entry)
    return items, skipped


async def send(
    items: list[BackfillItem], *, bootstrap: str, topic: str, progress: bool = True
) -> int:
    """Each item's event to ``topic`` (keyed by video id); how many were acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    sent = 0
    try:
        columns = (
            TextColumn("sending to {task.fields[topic]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        with Progress(*columns, disable=not progress) as bar:
            task = bar.add_task("send", total=len(items), topic=topic, rate="")
            for start in range(0, len(items), _WINDOW):
                window = items[start : start + _WINDOW]
                acks = [
                    await producer.send(
                        topic, item.event.to_bytes(), key=item.event.video_id.encode()
                    )
                    for item in window
                ]
                await asyncio.gather(*acks)
                sent += len(window)
                speed = bar.tasks[0].speed
                bar.update(task, advance=len(window), rate=f"{speed:.0f}/s" if speed else "")
    finally:
        await producer.stop()
    return sent
