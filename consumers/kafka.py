"""A Kafka consumer-group member that hands upload events to a ``VideoHandler``.

The poll loop never waits for a handler: every record becomes an asyncio task that hands it
to the handler (``consumers.delivery``), at most ``max_in_flight`` at once (partitions are
paused while full, and polling goes on so the group keeps us). Records of the bulk topic take
the room fresh uploads leave (``consumers.lanes``). Offsets are committed only up to the first
record not yet durable (``OffsetTracker``), every ``commit_interval_s``, before a rebalance,
and on stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import ConsumerStoppedError, IllegalStateError, KafkaError
from aiokafka.structs import TopicPartition

from consumers.admin import broker_error
from consumers.base import ConsumerCounts, ConsumerStats, RecordInfo, VideoHandler
from consumers.dead_letter import DeadLetterPublisher
from consumers.delivery import RecordDelivery
from consumers.errors import InvalidEvent
from consumers.events import parse_event
from consumers.lanes import Lanes
from consumers.offsets import OffsetTracker
from core.config import KafkaSettings
from core.errors import Abandoned
from core.records import BULK_LANE, Lane
from core.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class KafkaVideoConsumer:
    """One member of the ``settings.group_id`` consumer group on ``settings.topic``.

    ``await run()`` consumes until ``stop()`` (or ``request_stop()``) and then shuts down
    cleanly: in-flight videos get ``shutdown_timeout_s`` to finish, finished work is
    committed, and the member leaves the group. Delivery is at-least-once: a record whose
    handler did not return (crash, stop, revoked partition) is delivered again.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        handler: VideoHandler,
        *,
        dead_letters: DeadLetterPublisher | None = None,
    ) -> None:
        self._settings = settings
        self._dead_letters = dead_letters or DeadLetterPublisher(settings)
        self._tracker = OffsetTracker()
        self._lanes = Lanes(settings)
        self._tasks: dict[TopicPartition, dict[int, asyncio.Task[None]]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._finished = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._committed: dict[TopicPartition, int] = {}
        self._counts = ConsumerCounts()
        self._delivery = RecordDelivery(
            settings, handler, self._dead_letters, self._counts, self._stopping
        )

    # -- control ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask ``run()`` to stop. Safe from a signal handler and from other threads."""
        self._stop_requested = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake_for_stop)

    def _wake_for_stop(self) -> None:
        self._stopping.set()
        self._slot_freed.set()  # a poll loop waiting for a free slot looks up too

    async def stop(self) -> None:
        """Stop and wait until ``run()`` has shut down."""
        self.request_stop()
        if self._loop is not None:
            await self._finished.wait()

    @property
    def in_flight(self) -> int:
        return sum(len(tasks) for tasks in self._tasks.values())

    def stats(self) -> ConsumerStats:
        consumer = self._consumer
        assigned = frozenset(consumer.assignment()) if consumer is not None else frozenset()
        paused = len(consumer.paused()) if consumer is not None and assigned else 0
        return ConsumerStats(
            **dataclasses.asdict(self._counts),
            in_flight=self.in_flight,
            in_flight_bulk=self._lanes.in_flight(self._tasks)[BULK_LANE],
            paused_partitions=paused,
            assigned=assigned,
            committed=dict(self._committed),
        )

    # -- main loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Join the group and consume until stopped. Raises ``BrokerUnavailable`` when the
        broker cannot be reached at start."""
        if self._loop is not None:
            raise RuntimeError("a KafkaVideoConsumer runs once")
        self._loop = asyncio.get_running_loop()
        try:
            if self._stop_requested:
                return
            consumer = await self._start()
            commits = asyncio.create_task(self._commit_periodically())
            try:
                await self._poll(consumer)
            finally:
                await self._shut_down(consumer, commits)
        finally:
            self._finished.set()

    async def _start(self) -> AIOKafkaConsumer:
        s = self._settings
        consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap,
            group_id=s.group_id,
            client_id=s.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            max_poll_interval_ms=s.max_poll_interval_ms,
            max_poll_records=s.max_poll_records,
            fetch_max_wait_ms=s.fetch_max_wait_ms,
            request_timeout_ms=s.request_timeout_ms,
        )
        consumer.subscribe(self._lanes.topics, listener=_RebalanceListener(self))
        try:
            await self._dead_letters.start()
            # Joining waits for an assignment; bound it so a silent broker is an error.
            async with asyncio.timeout(s.request_timeout_ms / 1000 + s.session_timeout_ms / 500):
                await consumer.start()
        except (KafkaError, OSError, TimeoutError) as exc:
            await consumer.stop()
            await self._dead_letters.stop()
            raise broker_error(exc, f"joining group {s.group_id!r} on {s.bootstrap}") from exc
        except BaseException:
            await consumer.stop()
            await self._dead_letters.stop()
            raise
        self._consumer = consumer
        log.info("joined group %s on %s", s.group_id, s.topic)
        return consumer

    async def _poll(self, consumer: AIOKafkaConsumer) -> None:
        s = self._settings
        while not self._stop_requested:
            # Counted once for what to fetch; ``_take`` counts anew after the fetch.
            in_flight = self._lanes.in_flight(self._tasks)
            if self._lanes.fresh_slots(in_flight) <= 0:
                in_flight = await self._wait_for_slot(consumer)
            slots = self._lanes.fresh_slots(in_flight)
            fresh = self._lanes.open(consumer, in_flight)
            try:
                batch = {}
                if slots and fresh and self._lanes.bulk_topic is not None:
                    # What the fresh lane has at hand first: a bulk record must not take
                    # the slot a fresh one fetched at the same time could have.
                    batch = await consumer.getmany(*fresh, timeout_ms=0, max_records=slots)
                if not batch:
                    batch = await consumer.getmany(
                        timeout_ms=s.poll_timeout_ms if slots else 0, max_records=max(slots, 1)
                    )
            except ConsumerStoppedError:
                return
            except KafkaError as exc:
                log.warning("poll failed, retrying: %s", broker_error(exc, "polling"))
                await asyncio.sleep(s.retry_initial_s)
                continue
            self._take(consumer, batch)

    async def _wait_for_slot(self, consumer: AIOKafkaConsumer) -> dict[Lane, int]:
        """Wait up to one poll timeout for a free slot; if none frees, pause the partitions.
        The caller polls (empty) meanwhile, so the group does not think this member dead.
        Pausing drops the fetcher's read-ahead, so fast handlers are better off without it.
        Returns the records in flight per lane after the wait."""
        self._slot_freed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._settings.poll_timeout_ms / 1000):
                await self._slot_freed.wait()
        in_flight = self._lanes.in_flight(self._tasks)
        if self._lanes.fresh_slots(in_flight) <= 0:
            running = consumer.assignment() - consumer.paused()
            if running:
                consumer.pause(*running)
                self._counts.pauses += 1
        return in_flight

    def _take(self, consumer: AIOKafkaConsumer, batch: Mapping[TopicPartition, list[Any]]) -> None:
        """Start one task per record while its lane has a free slot (fresh records first);
        seek back over the rest so they are fetched again later. No await in here: the
        assignment cannot change meanwhile. The records in flight are counted anew: some may
        have finished while the fetch waited."""
        for tp, record, admitted in self._lanes.admit(batch, self._lanes.in_flight(self._tasks)):
            if not admitted:
                consumer.seek(tp, record.offset)
            elif self._tracker.track(tp, record.offset):
                self._start_record(tp, record)

    def _start_record(self, tp: TopicPartition, record: ConsumerRecord[bytes, bytes]) -> None:
        self._counts.records_seen += 1
        info = RecordInfo(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            timestamp=record.timestamp,
            lane=self._lanes.lane_of(record.topic),
        )
        # A factory, not a coroutine: a task cancelled before it starts leaves nothing
        # un-awaited behind.
        work: Callable[[], Awaitable[None]]
        try:
            event = parse_event(record.key, record.value, max_bytes=self._settings.max_event_bytes)
        except InvalidEvent as invalid:
            self._counts.records_invalid += 1
            work = functools.partial(self._delivery.reject, invalid, info, record)
        except Exception as exc:  # a bug in validation must not stop the partition
            log.exception("validating %s failed unexpectedly", info)
            self._counts.records_invalid += 1
            error = InvalidEvent(f"event could not be validated: {exc}", code="event_invalid")
            work = functools.partial(self._delivery.reject, error, info, record)
        else:
            work = functools.partial(self._delivery.handle, event, info, record)
        task = asyncio.create_task(self._run_record(tp, record.offset, work), name=f"record {info}")
        self._tasks.setdefault(tp, {})[record.offset] = task

    async def _run_record(
        self, tp: TopicPartition, offset: int, work: Callable[[], Awaitable[None]]
    ) -> None:
        try:
            await work()
        except Abandoned:
            log.info("left %s[%d]@%d unfinished for redelivery", tp.topic, tp.partition, offset)
        else:
            if self._tracker.done(tp, offset):
                self._counts.records_done += 1
        finally:
            tasks = self._tasks.get(tp)
            if tasks is not None and tasks.get(offset) is asyncio.current_task():
                del tasks[offset]
                if not tasks:
                    del self._tasks[tp]
            self._slot_freed.set()

    # -- commits and rebalances ------------------------------------------------------------

    async def _commit_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._settings.commit_interval_s)
            try:
                await self._commit()
            except Exception:  # a surprise must not end the commits for good
                log.exception("periodic commit failed")

    async def _commit(self, only: Iterable[TopicPartition] | None = None) -> bool:
        """Commit what is done on assigned partitions (``only`` these, if given). Returns
        False when the commit failed; the offsets stay committable for the next try."""
        consumer = self._consumer
        if consumer is None:
            return True
        async with self._commit_lock:
            assigned = consumer.assignment()
            wanted = assigned if only is None else assigned & set(only)
            offsets = {tp: o for tp, o in self._tracker.committable().items() if tp in wanted}
            if not offsets:
                return True
            try:
                async with asyncio.timeout(self._settings.commit_timeout_s):
                    await consumer.commit(offsets)
            except (KafkaError, TimeoutError) as exc:
                self._counts.commit_failures += 1
                log.warning("commit of %s failed: %s", offsets, broker_error(exc, "committing"))
                return False
            self._tracker.mark_committed(offsets)
            self._committed.update(offsets)
            self._counts.commits += 1
            return True

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        # aiokafka revokes every partition on every rebalance (eager protocol). Commit what
        # is done now, while this member's generation is still valid; in-flight work keeps
        # running until the new assignment says whether the partition stays here.
        self._counts.rebalances += 1
        await self._commit(revoked)

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        consumer = self._consumer
        lost = (self._tracker.partitions | set(self._tasks)) - assigned
        cancelled = [task for tp in lost for task in self._tasks.get(tp, {}).values()]
        for task in cancelled:
            task.cancel()
        if cancelled:
            log.info("partitions %s moved away: cancelled %d records", lost, len(cancelled))
            await asyncio.wait(cancelled, timeout=self._settings.commit_timeout_s)
        self._tracker.forget(lost)
        for tp in lost:
            self._committed.pop(tp, None)
        for tp in assigned & self._tracker.partitions:
            next_offset = self._tracker.next_offset(tp)
            if self._tracker.in_flight_for(tp) and next_offset is not None and consumer:
                # Still ours with records in hand: go on after them instead of refetching
                # from the committed offset and running them twice.
                log.info("keeping %s with records in flight, from offset %d", tp, next_offset)
                consumer.seek(tp, next_offset)
            else:
                self._tracker.forget([tp])
        self._slot_freed.set()

    # -- shutdown --------------------------------------------------------------------------

    async def _shut_down(self, consumer: AIOKafkaConsumer, commits: asyncio.Task[None]) -> None:
        self._stop_requested = True
        self._wake_for_stop()
        with contextlib.suppress(IllegalStateError):
            consumer.pause(*consumer.assignment())
        pending = [task for tasks in self._tasks.values() for task in tasks.values()]
        if pending:
            log.info("stopping: waiting for %d in-flight records", len(pending))
            _, unfinished = await asyncio.wait(pending, timeout=self._settings.shutdown_timeout_s)
            for task in unfinished:
                task.cancel()
            if unfinished:
                log.warning("stopping: cancelled %d unfinished records", len(unfinished))
                await asyncio.wait(unfinished, timeout=self._settings.commit_timeout_s)
        await cancel_and_wait(commits)
        try:
            await self._commit()
        except Exception:  # still leave the group: the next owner starts sooner
            log.exception("final commit failed")
        try:
            await consumer.stop()  # leaves the group, so the partitions move at once
        finally:
            await self._dead_letters.stop()
            self._consumer = None
        log.info("stopped; committed %s", self._committed)


class _RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: KafkaVideoConsumer) -> None:
        self._owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._owner._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._owner._on_assigned(set(assigned))
