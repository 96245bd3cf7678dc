"""Test data shared by the notifier tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import SecretStr

from checkpoint.base import OutboxEvent
from core.config import NotifySettings
from notify.signing import generate_secret

SECRET = generate_secret()


def make_event(video_id: str = "vid-1", **kw: Any) -> OutboxEvent:
    return OutboxEvent(
        type=kw.pop("type", "video.done"),
        video_id=video_id,
        tenant=kw.pop("tenant", "acme"),
        pipeline_version=kw.pop("pipeline_version", "pv1"),
        timestamp=kw.pop("timestamp", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        data=kw.pop("data", {"frames": 12}),
        **kw,
    )


def notify_settings(**kw: Any) -> NotifySettings:
    base: dict[str, Any] = {
        "webhook_secrets": (SecretStr(SECRET),),
        "allow_private_targets": True,
        "timeout_s": 2.0,
        "retry_schedule_s": (0.2, 0.5, 1.0),
        "jitter": 0.1,
        "read_block_ms": 200,
        "retry_poll_s": 0.05,
    }
    return NotifySettings(**{**base, **kw})
