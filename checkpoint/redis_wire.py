"""The Redis checkpoint store's edge: redis-py's exceptions mapped to the two kinds of error
once (``boundary``), stream replies and list cursors decoded, the live progress subscription."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from redis import exceptions as rexc
from redis.asyncio.client import PubSub

from checkpoint.base import ProgressEvent
from checkpoint.errors import CheckpointUnavailable
from checkpoint.scripts import progress_from_json
from core.errors import PermanentError

log = logging.getLogger("checkpoint.redis_store")

# Replies that mean "the server cannot take this now" rather than "this is wrong".
_BUSY_REPLIES = ("LOADING", "BUSY", "MASTERDOWN", "NOREPLICAS", "TRYAGAIN", "CLUSTERDOWN")
_TRANSIENT_REPLY_ERRORS = (rexc.ReadOnlyError, rexc.OutOfMemoryError, rexc.TryAgainError)


def stream_entries(reply: Any) -> list[tuple[str, dict[str, str] | None]]:
    """XREADGROUP's reply as (id, fields) pairs, whichever RESP shape the client parsed."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else (entries for _, entries in reply)
    out: list[tuple[str, dict[str, str] | None]] = []
    for entries in streams:
        for entry_id, fields in entries[0] if _nested(entries) else entries:
            out.append((str(entry_id), fields or None))
    return out


def _nested(entries: Any) -> bool:
    # RESP3 replies may wrap a stream's entries in one more list.
    return bool(entries) and isinstance(entries[0], list)


def encode_cursor(score: float, skip: int) -> str:
    return base64.urlsafe_b64encode(json.dumps([score, skip]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, int]:
    try:
        score, skip = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return float(score), int(skip)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise PermanentError(f"invalid list cursor {cursor!r}", code="invalid_cursor") from exc


class ProgressSubscription:
    """Live progress events from the moment it was opened; close it with ``aclose``.

    A subscription only reads, so a connection that died without a word (a server that hangs,
    a failover, a network path that drops everything) would look like a quiet channel for
    ever. After ``health_s`` without a message it sends a PING; when that is not answered
    within ``health_s`` either, the subscription ends with ``CheckpointUnavailable`` and its
    reader opens a new one."""

    def __init__(self, pubsub: PubSub, *, health_s: float) -> None:
        self._pubsub = pubsub
        self._health_s = health_s

    def __aiter__(self) -> ProgressSubscription:
        return self

    async def __anext__(self) -> ProgressEvent:
        pinged = False
        while True:
            async with boundary():
                message = await self._pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=self._health_s
                )
                if message is None and not pinged:
                    await self._pubsub.ping()
                    pinged = True
                    continue
            if message is None:
                raise CheckpointUnavailable(
                    f"the progress subscription had no answer to a ping in {self._health_s} s",
                    retry_after=1.0,
                )
            pinged = False  # anything read proves the connection
            if message.get("type") != "message":
                continue
            try:
                return progress_from_json(message["data"])
            except (KeyError, TypeError, ValueError):
                log.warning("dropping an undecodable progress event: %r", message["data"])

    async def aclose(self) -> None:
        with contextlib.suppress(rexc.RedisError, OSError):
            await self._pubsub.unsubscribe()
        await self._pubsub.aclose()  # type: ignore[no-untyped-call]


@contextlib.asynccontextmanager
async def boundary() -> AsyncIterator[None]:
    """Maps redis-py's exceptions to the two kinds of error, once, here."""
    try:
        yield
    except (rexc.AuthenticationError, rexc.AuthorizationError, rexc.NoPermissionError) as exc:
        raise PermanentError(f"redis refused access: {exc}", code="checkpoint_auth") from exc
    except (rexc.ConnectionError, rexc.TimeoutError, TimeoutError, OSError) as exc:
        raise CheckpointUnavailable(f"redis unreachable: {exc}", retry_after=1.0) from exc
    except rexc.ResponseError as exc:
        if isinstance(exc, _TRANSIENT_REPLY_ERRORS) or str(exc).startswith(_BUSY_REPLIES):
            raise CheckpointUnavailable(f"redis busy: {exc}", retry_after=1.0) from exc
        raise PermanentError(f"redis refused: {exc}", code="checkpoint_rejected") from exc
