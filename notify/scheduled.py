"""Retries that wait in the delivery log's schedule, taken when due and attempted.

An attempt that failed and may be made again is not waited for in memory: it goes into the
schedule (``DeliveryLog.schedule``, a sorted set by due time in Redis) and its outbox entry is
acknowledged. A loop of every notifier takes what is due (each retry to one notifier, held for
``reclaim_after_s`` in case that notifier goes away), makes the attempt and either drops the
retry (final) or schedules the next. So an endpoint that fails for a day holds a few entries
of the schedule, never the notifier's hands, and every other endpoint's messages go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from core.config import NotifySettings
from core.errors import Abandoned, ReelsenseError
from notify.attempt_log import last_attempt
from notify.attempts import WebhookAttempts
from notify.base import DeliveryLog, ScheduledRetry, WebhookMessage
from notify.outbox import InHand

log = logging.getLogger("notify.dispatcher")

# An attempt due now to an endpoint whose share is in use waits this long in the schedule.
BUSY_ENDPOINT_S = 1.0

Persist = Callable[[str, Callable[[], Awaitable[None]]], Awaitable[None]]


class ScheduledRetries:
    """The schedule's side of one notifier. ``persist(what, op)`` runs a write to the log
    until it works (``Abandoned`` once the notifier stops); ``wait(s)`` sleeps unless
    stopping (then ``Abandoned``)."""

    def __init__(
        self,
        delivery_log: DeliveryLog,
        attempts: WebhookAttempts,
        settings: NotifySettings,
        *,
        clock: Callable[[], float],
        persist: Persist,
        wait: Callable[[float], Awaitable[None]],
    ) -> None:
        self._log = delivery_log
        self._attempts = attempts
        self._settings = settings
        self._clock = clock
        self._persist = persist
        self._wait = wait
        self.tasks: set[asyncio.Task[None]] = set()  # retries being attempted now

    async def schedule(
        self, retry: ScheduledRetry, *, attempt: int | None = None, due: float | None = None
    ) -> None:
        """``retry`` (with another attempt number or due time) into the schedule; an attempt
        due now to an endpoint that is busy goes a little later."""
        due = retry.due_at if due is None else due
        if due <= self._clock():
            due = self._clock() + BUSY_ENDPOINT_S
        again = retry.model_copy(update={"attempt": attempt or retry.attempt, "due_at": due})
        await self._persist("retry schedule", lambda: self._log.schedule(again))

    async def run(self, stopping: asyncio.Event) -> None:
        """Take what is due, as much as there is room for, every ``retry_poll_s``."""
        settings = self._settings
        while not stopping.is_set():
            room = min(settings.max_concurrency - len(self.tasks), settings.read_count)
            taken: list[ScheduledRetry] = []
            if room > 0:
                try:
                    taken = await self._log.take_due(
                        self._clock(), limit=room, hold_s=settings.reclaim_after_s
                    )
                except ReelsenseError as exc:
                    log.warning("retry schedule unreadable (%s): %s", exc.code, exc)
            for retry in taken:
                task = asyncio.create_task(self._resume(retry), name=f"notify-{retry.id}")
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            with contextlib.suppress(Abandoned):
                await self._wait(settings.retry_poll_s)

    async def _resume(self, retry: ScheduledRetry) -> None:
        """One scheduled attempt: its retry dropped when final, else scheduled again."""
        entry = InHand(
            entry_id=retry.id,
            event=retry.event,
            message=WebhookMessage.from_event(retry.event),
            targets=[retry.url],
        )
        shares = self._attempts.shares
        try:
            last = await last_attempt(self._log, entry.message.id, retry.target)
            if last is not None and last.attempt >= retry.attempt:  # another notifier made it
                if last.outcome.final:
                    await self._drop(retry)
                elif last.next_retry_at is not None:
                    due = last.next_retry_at.timestamp()
                    await self.schedule(retry, attempt=last.attempt + 1, due=due)
                return
            if not shares.take(retry.target):  # its share is in use: a little later
                await self.schedule(retry, due=self._clock())
                return
            try:
                outcome, next_at = await self._attempts.make(
                    entry, retry.url, retry.target, retry.attempt
                )
            finally:
                shares.give(retry.target)
            if outcome.final:
                await self._drop(retry)
            else:
                await self.schedule(retry, attempt=retry.attempt + 1, due=next_at)
        except Abandoned:
            log.info("stopping: retry %s left to its schedule", retry.id)
        except Exception:  # one broken retry must not stop the others: its hold runs out
            log.exception("scheduled retry %s not finished", retry.id)

    async def _drop(self, retry: ScheduledRetry) -> None:
        await self._persist("retry drop", lambda: self._log.unschedule(retry.id))
