"""A backfill through the service: each video's upload event to the bulk lane.

The service takes bulk events only in the room fresh uploads leave (``consumers.lanes``) and
skips a video already done with its pipeline version, so sending the same backfill again costs
only the events. Events are sent with ``acks=all``, a window of them in flight at once; the
summary says how many went and what was skipped, and why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka import AIOKafkaProducer

from backfill.progress import RateBar
from backfill.sources import BackfillItem, Skipped

_WINDOW = 256  # events awaiting their acknowledgement at once


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
        with RateBar(f"sending to {topic}", len(items), enabled=progress) as bar:
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
                bar.advance(len(window))
    finally:
        await producer.stop()
    return sent
