"""The notifier loop: outbox -> webhooks to every target + the status topic -> ack.

Each outbox entry stays unacknowledged until the status topic has the event and every target
has either reached a final outcome (delivered, refused, dead-lettered, disabled) or has its
next attempt waiting in the delivery log's schedule (``ScheduledRetry``, due by time). A retry
never waits in memory: an endpoint that fails or hangs for hours leaves its retries in the
schedule and nothing in hand, so the outbox goes on being read and every other tenant's events
go out. Each endpoint has a bounded share of the attempts under way
(``notify.max_concurrency_per_endpoint``); an endpoint over its failure budget is disabled
(``EndpointHealth``) and its tenant told with an ``endpoint.disabled`` event on the status
topic. After a crash the store hands an unacked entry out again, and a retry held by a notifier
that went away is due again after ``reclaim_after_s``; the delivery resumes from the delivery
log (attempt number, next due time), and anything sent again carries the same ``webhook-id``:
at-least-once delivery with receiver-side deduplication.

``stop()`` is graceful: reading stops, and HTTP attempts already under way get up to
``drain_timeout_s`` to finish and ack their entries (or reschedule their retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

from checkpoint.base import CheckpointStore, OutboxEvent
from core.config import NotifySettings
from core.errors import Abandoned, ReelsenseError
from core.retry import HALF_JITTER, RetryFailure, RetryPolicy, sleep_unless_stopped
from core.tasks import cancel_and_wait
from core.urls import redact_url
from notify.attempt_log import last_attempt, record_attempt
from notify.attempts import WebhookAttempts
from notify.base import (
    DeliveryLog,
    DeliveryResult,
    EndpointState,
    Outcome,
    ScheduledRetry,
    StatusPublisher,
    WebhookDelivery,
    WebhookMessage,
)
from notify.delivery_log import MemoryDeliveryLog
from notify.endpoints import utc_from
from notify.errors import StatusPublishRefused
from notify.outbox import InHand, ReclaimingStore, TakenOver, only, targets_for
from notify.scheduled import ScheduledRetries

log = logging.getLogger(__name__)


class NotificationDispatcher:
    """Delivers outbox events as signed webhooks and status-topic records.

    ``run()`` loops until ``stop()``, once per instance. ``sender`` and ``publisher`` belong to
    the dispatcher and are closed when ``run()`` returns; ``store`` and a ``delivery_log``
    passed in belong to the caller. ``consumer_name`` should be stable across restarts (a pod
    name): a restarted notifier then resumes its own unacked entries at once; entries of a
    consumer that never comes back are taken over after ``reclaim_after_s``.
    """

    def __init__(
        self,
        store: CheckpointStore,
        sender: WebhookDelivery,
        publisher: StatusPublisher | None,
        settings: NotifySettings,
        consumer_name: str,
        *,
        delivery_log: DeliveryLog | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._sender = sender
        self._publisher = publisher
        self._settings = settings
        self._consumer = consumer_name
        self.delivery_log = delivery_log or MemoryDeliveryLog(
            max_attempts=settings.log_max_attempts
        )
        self._clock = clock
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not security
        # Store, broker and log hiccups: retried until they pass (or until stopping).
        self._store_retry = RetryPolicy(
            first_s=settings.store_retry_initial_s,
            max_s=settings.store_retry_max_s,
            jitter=HALF_JITTER,
        )
        self.attempts = WebhookAttempts(
            sender,
            self.delivery_log,
            settings,
            clock=clock,
            rng=self._rng,
            on_disabled=self._announce_disabled,
        )
        self.retries = ScheduledRetries(
            self.delivery_log,
            self.attempts,
            settings,
            clock=clock,
            persist=self._retry,
            wait=self._wait,
        )
        self._entries: dict[str, InHand] = {}
        self._notices: set[asyncio.Task[None]] = set()  # endpoint.disabled being published
        self._room = asyncio.Event()
        self._stopping = asyncio.Event()
        self._started = False
        self.acked = 0  # entries acknowledged since start, for tests and metrics

    @property
    def pending(self) -> int:
        """Outbox entries taken and not yet acknowledged."""
        return len(self._entries)

    async def settled(self) -> bool:
        """Nothing in hand and no retry waiting in the schedule: every message this notifier
        knows of has reached its final outcome."""
        return not self._entries and await self.delivery_log.scheduled() == 0

    async def run(self) -> None:
        """Read, deliver and ack until ``stop()``; unfinished entries stay unacked."""
        if self._started:
            raise RuntimeError("run() may be called once per dispatcher")
        self._started = True
        await self._store.rewind_outbox(self._consumer)
        reclaim = (
            asyncio.create_task(self._reclaim_loop(), name="notify-reclaim")
            if isinstance(self._store, ReclaimingStore)
            else None
        )
        scheduled = asyncio.create_task(self.retries.run(self._stopping), name="notify-retries")
        try:
            await self._read_loop()
        finally:
            self._stopping.set()
            if reclaim is not None:
                reclaim.cancel()
            tasks = [e.task for e in self._entries.values() if e.task is not None]
            tasks += [*self.retries.tasks, *self._notices]
            if tasks and self._settings.drain_timeout_s > 0:
                await asyncio.wait(tasks, timeout=self._settings.drain_timeout_s)
            loops = [scheduled, *([reclaim] if reclaim else [])]
            await cancel_and_wait(*tasks, *loops)
            self._entries.clear()
            await self._close_clients()

    async def _close_clients(self) -> None:
        try:
            await self._sender.close()
        finally:
            if self._publisher is not None:
                await self._publisher.stop()

    async def stop(self) -> None:
        """Stop reading; attempts under way may finish (``drain_timeout_s``), waiting retries
        are abandoned unacked and a later run with the same consumer name picks them up."""
        self._stopping.set()
        self._room.set()

    async def enable_endpoint(self, url: str) -> None:
        """Re-enable an endpoint an operator has fixed; its failure streak starts over."""
        await self.attempts.health.save(EndpointState(url=url))

    async def _reclaim_loop(self) -> None:
        """Keep the entries in hand, and take over entries of notifiers that went away
        without acking them."""
        assert isinstance(self._store, ReclaimingStore)
        min_idle_ms = int(self._settings.reclaim_after_s * 1000)
        while not self._stopping.is_set():  # not only cancel: a Redis call can lose one
            await self._renew_holds(self._store)
            room = self._settings.max_pending_events - len(self._entries)
            taken: list[tuple[str, OutboxEvent]] = []
            if room > 0:
                try:
                    taken = await self._store.reclaim_outbox(
                        self._consumer, min_idle_ms, count=min(room, self._settings.read_count)
                    )
                except ReelsenseError as exc:
                    log.warning("outbox reclaim failed (%s): %s", exc.code, exc)
            for entry_id, event in taken:
                if entry_id not in self._entries:
                    log.info("took over outbox entry %s (%s)", entry_id, event.webhook_id)
                    self._start(entry_id, event)
            with contextlib.suppress(Abandoned):
                await self._wait(self._settings.reclaim_interval_s)

    async def _renew_holds(self, store: ReclaimingStore) -> None:
        """Renew the hold on every entry in hand, so no other notifier takes one over while
        its retry waits; stop working on any entry another notifier took over all the same
        (this one stalled past ``reclaim_after_s``), so that one notifier sends it."""
        in_hand = list(self._entries)
        try:
            held = set(await store.hold_outbox(self._consumer, in_hand))
        except ReelsenseError as exc:
            log.warning("outbox hold failed (%s): %s", exc.code, exc)
            return
        for entry_id in set(in_hand) - held:
            entry = self._entries.get(entry_id)
            if entry is None or entry.task is None or entry.task.done():
                continue  # acked meanwhile
            if not entry.taken_over:
                log.warning("outbox entry %s was taken over by another notifier", entry_id)
            entry.taken_over = True
            if not entry.sending:  # a wait is cut; an attempt under way is finished first
                entry.task.cancel()

    async def _read_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            room = self._settings.max_pending_events - len(self._entries)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            read = asyncio.ensure_future(
                self._store.read_outbox(
                    self._consumer,
                    count=min(self._settings.read_count, room),
                    block_ms=self._settings.read_block_ms,
                )
            )
            stopping = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait({read, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not read.done():
                read.cancel()
                with contextlib.suppress(asyncio.CancelledError, ReelsenseError):
                    await read
                return
            try:
                batch = read.result()
            except ReelsenseError as exc:
                failures += 1
                log.warning("outbox read failed (%s), retrying: %s", exc.code, exc)
                with contextlib.suppress(Abandoned):
                    await self._wait(self._store_retry.delay(failures, rng=self._rng))
                continue
            failures = 0
            fresh = [(eid, ev) for eid, ev in batch if eid not in self._entries]
            for entry_id, event in fresh:
                self._start(entry_id, event)
            if batch and not fresh:
                # The store handed back only entries already in hand: wait for one to finish
                # rather than asking again at once.
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.read_block_ms / 1000):
                        await self._room.wait()

    def _start(self, entry_id: str, event: OutboxEvent) -> None:
        entry = InHand(
            entry_id=entry_id,
            event=event,
            message=WebhookMessage.from_event(event),
            targets=targets_for(event, self._settings.subscriptions),
        )
        self._entries[entry_id] = entry
        entry.task = asyncio.create_task(self._handle(entry), name=f"notify-{entry_id}")

    async def _handle(self, entry: InHand) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for target in entry.targets:
                    group.create_task(self._deliver(entry, target))
                if self._publisher is not None:
                    group.create_task(self._publish(entry))
            await self._retry("outbox ack", lambda: self._store.ack_outbox([entry.entry_id]))
        except Exception as exc:
            if only(exc, Abandoned):
                log.info("stopping: outbox entry %s left unacked", entry.entry_id)
            elif only(exc, TakenOver):
                log.info("outbox entry %s left to the notifier that took it over", entry.entry_id)
            else:
                # One broken entry must not stop the notifier. Left unacked, the store hands
                # it out again; the log keeps what was already delivered.
                log.exception("outbox entry %s not finished, left unacked", entry.entry_id)
        else:
            self.acked += 1
            log.info(
                "notified %s %s (%s): %s",
                entry.event.type,
                entry.event.video_id,
                entry.message.id,
                {t: o.value for t, o in entry.outcomes.items()} or "no webhook target",
            )
        finally:
            self._entries.pop(entry.entry_id, None)
            self._room.set()

    async def _publish(self, entry: InHand) -> None:
        """The event on the status topic; retried while the broker may take it, dead-lettered
        (target ``kafka:{topic}``) when it never will."""
        publisher = self._publisher
        assert publisher is not None
        try:
            await self._retry("status topic", lambda: publisher.publish(entry.event))
        except StatusPublishRefused as exc:
            result = DeliveryResult(Outcome.FAILED, code=exc.code, detail=str(exc))
            await record_attempt(
                self.delivery_log,
                entry,
                target=f"kafka:{publisher.topic}",
                attempt=1,
                outcome=Outcome.FAILED,
                result=result,
                at=self._clock(),
                next_at=None,
            )

    async def _deliver(self, entry: InHand, target: str) -> None:
        """The first attempt of one message to one target (or the next, resumed from the log
        after a restart), when it is due and the endpoint has room; any later one goes to the
        schedule. The log and the endpoint state know the target without its credentials."""
        url, target = target, redact_url(target)
        attempt, due = 1, self._clock()
        if entry.taken_over:
            raise TakenOver
        # The log first: what an earlier life of this notifier, or another notifier that held
        # the entry, did is not done again.
        last = await last_attempt(self.delivery_log, entry.message.id, target)
        if last is not None:
            if last.outcome.final:
                entry.outcomes[target] = last.outcome
                return
            attempt = last.attempt + 1
            if last.next_retry_at is not None:
                due = last.next_retry_at.timestamp()
        shares = self.attempts.shares
        if due <= self._clock() and shares.take(target):
            entry.sending += 1
            try:
                outcome, next_at = await self.attempts.make(entry, url, target, attempt)
            finally:
                entry.sending -= 1
                shares.give(target)
            if outcome.final:
                entry.outcomes[target] = outcome
                return
            assert next_at is not None
            attempt, due = attempt + 1, next_at
        retry = ScheduledRetry(
            event=entry.event, url=url, target=target, attempt=attempt, due_at=due
        )
        await self.retries.schedule(retry)

    def _announce_disabled(self, event: OutboxEvent, state: EndpointState) -> None:
        """``endpoint.disabled`` on the status topic, for the tenant whose message disabled
        the endpoint: its webhooks no longer reach it, so the stream tells it."""
        log.warning("webhook endpoint %s disabled (%s)", state.url, state.disabled_reason)
        publisher = self._publisher
        if publisher is None:
            return
        notice = OutboxEvent(
            type="endpoint.disabled",
            video_id=event.video_id,
            tenant=event.tenant,
            pipeline_version=event.pipeline_version,
            data={"endpoint": state.url, "reason": state.disabled_reason},
            timestamp=utc_from(self._clock()),
        )

        async def publish() -> None:
            with contextlib.suppress(Abandoned, ReelsenseError):
                await self._retry("endpoint notice", lambda: publisher.publish(notice))

        task = asyncio.create_task(publish(), name="notify-endpoint-disabled")
        self._notices.add(task)  # drained at stop like an attempt
        task.add_done_callback(self._notices.discard)

    async def _retry(self, what: str, op: Callable[[], Awaitable[None]]) -> None:
        """Retryable failures of the store or the broker: back off until it works."""

        def failed(failure: RetryFailure) -> None:
            code = getattr(failure.error, "code", type(failure.error).__name__)
            log.warning("%s failed (%s), retrying: %s", what, code, failure.error)

        await self._store_retry.call(op, stop=self._stopping, on_failure=failed, rng=self._rng)

    async def _wait(self, seconds: float) -> None:
        """Sleep, unless stopping: then raise ``Abandoned`` (at once, or when it begins)."""
        await sleep_unless_stopped(seconds, self._stopping)
