"""The one writer of results: batches many videos into one commit per sink.

Lance needs a single writer per table (two writers inserting the same new key both succeed
and duplicate rows), and a commit per video at a high rate would make thousands of tiny
versions. So every finished video is handed to one ``SinkWriter``; a background thread writes
what has gathered when ``batch_videos`` are waiting or the oldest has waited ``flush_s``. With
``flush_s`` 0 (the default) that is a group commit: a video is written as soon as the thread is
free, and the videos that finish during a commit share the next one, so batches grow with the
load and a video alone waits for nothing. Each caller gets a future that resolves once its
video is in every sink, and only then may it move the checkpoint.

With a ``WriterLease`` (``sinks.writer_lease``) it is also the only writer across processes
and clusters: it takes the lease before its first commit and confirms it right before each
sink writes; without the lease it commits nothing and the batch fails, retryable.

The sinks of a write share each result's views (shots, text spans, segments): derived once,
in ``sinks.views``, while the write lasts.

Free of Ray on purpose: the runtime wraps it in an actor; tests and the sequential runner use
it directly.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType

from core.config import StorageSettings
from core.errors import PermanentError, ReelsenseError
from core.records import VideoRef, VideoResult
from models.base import ImageEmbeddingModel, TextEmbeddingModel
from sinks.base import Sink
from sinks.errors import SinkUnavailable, as_sink_error
from sinks.forgetting import forget_everywhere, purge_due
from sinks.lineup import sinks_from_settings
from sinks.partial_writes import FinalWrites, Part, PartialSink
from sinks.views import shared_views
from sinks.writer_lease import WriterLease

log = logging.getLogger(__name__)

FINALS_KEPT = 65_536  # videos whose last final write's epoch is remembered


@dataclass
class WriterStats:
    batches: int = 0  # batches written to every sink
    videos: int = 0  # videos in those batches
    failed_batches: int = 0
    last_batch_videos: int = 0
    last_write_s: float = 0.0  # wall time of the last successful batch, all sinks
    partials: int = 0  # parts of videos written (runtime.partials)
    failed_partials: int = 0
    superseded_partials: int = 0  # came after their video's final write: not written
    # Seconds from a part's analysis (its ``completed_at``) to its commit, the latest ones.
    partial_lags_s: deque[float] = field(default_factory=lambda: deque(maxlen=4096))


@dataclass
class _Pending:
    result: VideoResult
    future: concurrent.futures.Future[None]
    submitted: float


@dataclass
class _Forget:
    videos: Sequence[VideoRef]
    future: concurrent.futures.Future[None]


class SinkWriter:
    """Writes submitted results to every sink, many videos per commit, from one thread."""

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        batch_videos: int = 16,
        flush_s: float = 0.0,
        name: str = "sink-writer",
        lease: WriterLease | None = None,
    ) -> None:
        """``lease``: the tables' writer lease, taken before the first commit, confirmed
        before each, released on close."""
        if batch_videos < 1:
            raise ValueError("batch_videos must be at least 1")
        self.sinks = list(sinks)
        self.batch_videos = batch_videos
        self.flush_s = flush_s
        self.lease = lease
        self.stats = WriterStats()
        self._pending: list[_Pending] = []
        self._parts: list[Part] = []
        self._forgets: list[_Forget] = []
        self._purge_at = math.inf  # time.monotonic() when a sink's purge step is due
        self._finals = FinalWrites(FINALS_KEPT)  # parts they supersede are not written
        self._cond = threading.Condition()
        self._closing = False
        self._flush_requested = False
        self._opened: set[int] = set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @classmethod
    def from_settings(
        cls,
        storage: StorageSettings,
        *,
        embedding_dim: int | None = None,
        text_model: TextEmbeddingModel | None = None,
        image_model: ImageEmbeddingModel | None = None,
        lease: WriterLease | None = None,
    ) -> SinkWriter:
        return cls(
            sinks_from_settings(
                storage, embedding_dim, text_model=text_model, image_model=image_model
            ),
            batch_videos=storage.writer_batch_videos,
            flush_s=storage.writer_flush_s,
            lease=lease,
        )

    def submit(self, result: VideoResult) -> concurrent.futures.Future[None]:
        """Queue one video's result; the future resolves when every sink has it.

        It fails with SinkUnavailable (try again later) or SinkRejected (do not).
        """
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._closing:
                future.set_exception(
                    SinkUnavailable("the sink writer is closed", code="sink_writer_closed")
                )
                return future
            self._pending.append(_Pending(result, future, time.monotonic()))
            if len(self._pending) >= self.batch_videos:
                self._cond.notify_all()
            elif len(self._pending) == 1:
                self._cond.notify_all()  # start the flush_s clock of a new batch
        return future

    def submit_partial(self, *parts: VideoResult) -> None:
        """Queue parts of videos in analysis for the sinks that take parts; written at once,
        together, not waited for (a failure is logged)."""
        self._queue_parts([Part(part.ref.video_id, part) for part in parts])

    def drop_partial(self, video_id: str) -> None:
        """Queue the removal of a failed video's partial rows."""
        self._queue_parts([Part(video_id, None)])

    def forget(self, videos: Sequence[VideoRef]) -> concurrent.futures.Future[None]:
        """Queue the removal of everything every sink holds of ``videos`` (deleted), after
        the writes submitted before it; the future resolves once every sink removed them
        (their bytes are purged from disk later, within ``storage.deletion_max_s``)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            self._forgets.append(_Forget(list(videos), future))
            self._cond.notify_all()
        return future

    def _queue_parts(self, parts: list[Part]) -> None:
        with self._cond:
            if parts and not self._closing:
                self._parts.extend(parts)
                self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Write everything submitted so far now, and wait for it (failures stay on futures)."""
        with self._cond:
            futures = [p.future for p in self._pending]
            self._flush_requested = True
            self._cond.notify_all()
        concurrent.futures.wait(futures, timeout=timeout)

    def close(self, timeout: float | None = None) -> None:
        """Write what is pending, stop the thread, close the sinks, release the lease."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            # The lease too: a commit may still come, and only the lease's holder may make it.
            log.warning("sink writer still busy after %ss; sinks left open", timeout)
            return
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("closing sink %s failed", sink.name)
        if self.lease is not None:
            self.lease.close()

    def __enter__(self) -> SinkWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # The writer thread.

    def _due(self) -> bool:
        if not self._pending:
            return False
        if self._closing or self._flush_requested or len(self._pending) >= self.batch_videos:
            return True
        return time.monotonic() - self._pending[0].submitted >= self.flush_s

    def _take(self) -> tuple[list[Part], list[_Pending], list[_Forget]] | None:
        """Wait until parts or deletions wait, a batch is due or a purge step; take them. None
        once closed and drained."""
        with self._cond:
            while not self._parts and not self._forgets and not self._due():
                if self._closing:
                    return None
                wait = self._purge_at - time.monotonic()
                if wait <= 0:
                    break
                if self._pending:
                    flush = self.flush_s - (time.monotonic() - self._pending[0].submitted)
                    wait = min(max(0.0, flush), wait)
                self._cond.wait(None if wait == math.inf else wait)
            parts, self._parts = self._parts, []
            forgets, self._forgets = self._forgets, []
            batch: list[_Pending] = []
            if self._due():
                batch = self._pending[: self.batch_videos]
                del self._pending[: self.batch_videos]
                if not self._pending:
                    self._flush_requested = False
        # A caller may have given up on its video; the others are written anyway.
        return parts, [p for p in batch if p.future.set_running_or_notify_cancel()], forgets

    def _run(self) -> None:
        # Sinks open now rather than on the first write: loading a text model or creating a
        # table would otherwise delay the first video's results (and its parts' search) by
        # seconds. One that cannot open yet is opened again at its first write. Creating a
        # table is a commit too: only with the lease (a writer without it opens them later).
        for sink in self.sinks:
            try:
                self._fence(wait=False)
                self._open(sink)
            except Exception as exc:
                log.info("sink %s not open yet: %s", sink.name, exc)
        self._let_go_if_idle()
        self._purge()  # when the first purge is due (``sinks.lance_purge``)
        while (taken := self._take()) is not None:
            parts, batch, forgets = taken
            if parts:
                with shared_views():
                    self._write_parts(parts)
            try:
                if batch:
                    with shared_views():  # each result's views derived once for all sinks
                        self._write_batch(batch)
            except BaseException as exc:  # a bug here must not leave callers waiting forever
                error = as_sink_error(exc, "sink_writer")
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(error)
                if not isinstance(exc, Exception):
                    raise
            finally:
                self._forget(forgets)  # after the writes submitted before them
                self._purge()
                self._let_go_if_idle()

    def _forget(self, forgets: list[_Forget]) -> None:
        for forget in forgets:
            error = forget_everywhere(self.sinks, forget.videos, self._fence, self._open)
            if error is None:
                forget.future.set_result(None)
            else:
                forget.future.set_exception(error)

    def _purge(self) -> None:
        due_in = purge_due(self.sinks, lambda: self._fence(wait=False))
        self._purge_at = math.inf if due_in is None else time.monotonic() + due_in

    def _let_go_if_idle(self) -> None:
        """The lease goes back when nothing waits here: another writer may have results."""
        with self._cond:
            idle = not self._pending and not self._parts
        if idle and self.lease is not None:
            self.lease.let_go()

    def _write_parts(self, parts: list[Part]) -> None:
        live = [part for part in parts if not self._finals.superseded(part)]
        self.stats.superseded_partials += len(parts) - len(live)
        results = [part.result for part in live if part.result is not None]
        dropped = [part.video_id for part in live if part.result is None]
        for sink in self.sinks:
            if not isinstance(sink, PartialSink) or not (results or dropped):
                continue
            try:
                # Not worth waiting for the lease: the final write carries the parts too.
                self._fence(wait=False)
                self._open(sink)
                sink.write_partial(results)
                sink.drop_partial(dropped)
            except Exception as exc:
                self.stats.failed_partials += len(results)
                log.warning("parts of %d videos not written: %s", len(live), exc)
                return
        committed = datetime.now(UTC)
        self.stats.partials += len(results)
        for result in results:
            self.stats.partial_lags_s.append((committed - result.completed_at).total_seconds())

    def _open(self, sink: Sink | PartialSink) -> None:
        if id(sink) not in self._opened:
            sink.open()  # type: ignore[union-attr]
            self._opened.add(id(sink))

    def _fence(self, *, wait: bool = True) -> None:
        """Take the lease, or confirm and extend it, right before a sink commits: a writer
        that lost it commits nothing more. Once closing, a lease not held is not waited for."""
        if self.lease is not None:
            self.lease.hold(wait=wait and not self._closing)

    def _write_all(self, results: Sequence[VideoResult]) -> ReelsenseError | None:
        for sink in self.sinks:
            try:
                self._fence()
                self._open(sink)
                sink.write(results)
            except Exception as exc:
                return as_sink_error(exc, sink.name)
        return None

    def _write_batch(self, batch: list[_Pending]) -> None:
        started = time.monotonic()
        error = self._write_all([p.result for p in batch])
        if error is None:
            self._finals.finished([p.result for p in batch])
            self._record_success(len(batch), time.monotonic() - started)
            for pending in batch:
                pending.future.set_result(None)
            return
        self.stats.failed_batches += 1
        video_ids = {p.result.ref.video_id for p in batch}
        if isinstance(error, PermanentError) and len(video_ids) > 1:
            # One bad video must not fail the others: write each alone to find out which.
            log.warning("batch of %d videos rejected (%s); writing one by one", len(batch), error)
            self._write_one_by_one(batch)
            return
        log.warning("batch of %d videos failed: %s", len(batch), error)
        for pending in batch:
            pending.future.set_exception(error)

    def _write_one_by_one(self, batch: list[_Pending]) -> None:
        by_video: dict[str, list[_Pending]] = {}
        for pending in batch:
            by_video.setdefault(pending.result.ref.video_id, []).append(pending)
        for group in by_video.values():
            started = time.monotonic()
            error = self._write_all([group[-1].result])
            if error is None:
                self._finals.finished([group[-1].result])
                self._record_success(1, time.monotonic() - started)
            for pending in group:
                if error is None:
                    pending.future.set_result(None)
                else:
                    pending.future.set_exception(error)

    def _record_success(self, videos: int, seconds: float) -> None:
        self.stats.batches += 1
        self.stats.videos += videos
        self.stats.last_batch_videos = videos
        self.stats.last_write_s = seconds
