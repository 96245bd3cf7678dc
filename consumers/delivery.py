"""One record's event to the end: the ``VideoHandler``'s call retried until its effect is
durable, or an invalid event rejected and published to the dead-letter topic."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable

from aiokafka import ConsumerRecord

from consumers.base import ConsumerCounts, RecordInfo, VideoHandler
from consumers.dead_letter import DeadLetterPublisher, DeadLetterTooLarge
from consumers.errors import InvalidEvent
from consumers.events import Event, VideoDeleted
from consumers.video_locks import VideoLocks
from core.config import KafkaSettings
from core.errors import PermanentError
from core.retry import HALF_JITTER, RetryFailure, RetryPolicy

# Under the consumer's name, with the rest of what happens to its records.
log = logging.getLogger("consumers.kafka")


class RecordDelivery:
    """Hands records' events to the handler, one call per video at a time, and counts what
    came of them in ``counts``. A call is retried until it works; once ``stopping`` is set,
    the record is left unfinished (``Abandoned``) for redelivery."""

    def __init__(
        self,
        settings: KafkaSettings,
        handler: VideoHandler,
        dead_letters: DeadLetterPublisher,
        counts: ConsumerCounts,
        stopping: asyncio.Event,
    ) -> None:
        self._handler = handler
        self._dead_letters = dead_letters
        self._counts = counts
        self._stopping = stopping
        self._video_locks = VideoLocks()
        # An exception means the effect is not durable, so the offset must not move: every
        # failure is retried until it works, or until stopping leaves the record unfinished.
        self._record_retry = RetryPolicy(
            first_s=settings.retry_initial_s,
            max_s=settings.retry_max_s,
            jitter=HALF_JITTER,
            retry_on=(Exception,),
            never=(),
        )
        # Recording an invalid event as failed is a courtesy: one the store refuses for good
        # must not hold the partition, so the event goes to the dead letter without it.
        self._reject_retry = dataclasses.replace(self._record_retry, never=(PermanentError,))
        self._handle_retry = dataclasses.replace(self._record_retry, never=(InvalidEvent,))
        # A dead letter the broker refuses in every form would hold the partition for ever.
        self._dead_letter_retry = dataclasses.replace(
            self._record_retry, never=(DeadLetterTooLarge,)
        )

    async def handle(
        self, event: Event, info: RecordInfo, record: ConsumerRecord[bytes, bytes]
    ) -> None:
        """The event to the handler; one it refuses for good (``InvalidEvent``) is rejected.
        A deletion does not wait for the video's upload under way: it fences it out."""
        try:
            if isinstance(event, VideoDeleted):
                delete = functools.partial(self._handler.delete, event, info)
                await self._retry(delete, "delete", info, self._handle_retry)
                return
            async with self._video_locks.hold(event.video_id):
                handle = functools.partial(self._handler.handle, event, info)
                await self._retry(handle, "handle", info, self._handle_retry)
        except InvalidEvent as refused:  # refused for good by the handler
            self._counts.records_invalid += 1
            await self.reject(refused, info, record)

    async def reject(
        self, error: InvalidEvent, info: RecordInfo, record: ConsumerRecord[bytes, bytes]
    ) -> None:
        """The invalid event to the handler's ``reject`` (skipped when that is refused for
        good), then to the dead-letter topic."""
        # One WARNING line per invalid event, this one: the handler's reject logs lower.
        log.warning(
            "invalid event at %s (%s): %s; to dead-letter topic %s",
            info,
            error.code,
            error,
            self._dead_letters.topic,
        )
        try:
            async with self._video_locks.hold(error.video_id):
                reject = functools.partial(self._handler.reject, error, info)
                await self._retry(reject, "reject", info, self._reject_retry)
        except PermanentError as refused:
            log.error("reject of %s refused (%s): %s", info, refused.code, refused)
        try:
            await self._retry(
                lambda: self._dead_letters.publish(
                    info,
                    record.value,
                    error,
                    original_headers=record.headers,
                    timestamp_type=record.timestamp_type,
                ),
                "dead-letter",
                info,
                self._dead_letter_retry,
            )
        except DeadLetterTooLarge as lost:  # its failed status (where readable) remains
            log.error("no dead letter for %s (%s): %s", info, lost.code, lost)
            self._counts.dead_letters_lost += 1
        else:
            self._counts.dead_lettered += 1

    async def _retry(
        self,
        call: Callable[[], Awaitable[None]],
        what: str,
        info: RecordInfo,
        policy: RetryPolicy | None = None,
    ) -> None:
        """Call until it succeeds (or fails in a way ``policy`` does not retry);
        ``Abandoned`` when stopping."""

        def failed(failure: RetryFailure) -> None:
            self._counts.handler_failures += 1
            log.warning(
                "%s of %s failed (attempt %d), retrying in %.2fs: %s: %s",
                what,
                info,
                failure.attempt,
                failure.delay,
                type(failure.error).__name__,
                failure.error,
                exc_info=failure.error if failure.attempt == 1 else None,
            )

        policy = policy or self._record_retry
        await policy.call(call, stop=self._stopping, on_failure=failed)
