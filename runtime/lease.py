"""An attempt's lease on its video: who runs it, renewed while it makes progress, let go when
it stops.

A claim takes over a running video only from its own owner or from one whose lease lapsed
(see ``CheckpointStore.claim``), so a member expelled from the consumer group while its
attempt still runs (a zombie) and the partition's new owner never both work on one video:
the new owner waits until the zombie finishes, stops or freezes past its lease. A renewal
that finds the attempt taken over ends the attempt's work at once.

Renewing while the attempt merely exists would let a hung one (a stage that never answers, a
deadlock) hold its video for ever, and its partition with it: the lease is renewed only while
the attempt's ``Heartbeat`` beats (a chunk, a stage's result, a write), and an attempt silent
for ``runtime.stall_s`` is stopped with ``AttemptStalled`` (retried as any failure) and its
lease let go. A claimant waits for a live owner ``runtime.claim_wait_s`` at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator

from checkpoint.base import CheckpointStore, Claim, VideoState
from checkpoint.errors import StaleEpoch, VideoBusy
from core.config import RuntimeSettings
from core.errors import ReelsenseError, RetryableError
from core.records import VideoRef
from core.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_RELEASE_TIMEOUT_S = 2.0


class AttemptStalled(RetryableError):
    """The attempt showed no progress for ``runtime.stall_s``: stopped, to be tried again."""

    code = "attempt_stalled"


class Heartbeat:
    """When the attempt last made progress (``time.monotonic``)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def beat(self) -> None:
        self.last = time.monotonic()

    def silent_s(self) -> float:
        return time.monotonic() - self.last


class Superseded(Exception):
    """This process's attempt ``epoch`` was taken over by a newer one."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"attempt {epoch} was taken over")
        self.epoch = epoch


def owner_id(settings: RuntimeSettings) -> str:
    """This process's name on the leases: ``instance_id`` when set (a replica that keeps it
    over restarts takes its own videos back at once), else one of its own."""
    if settings.instance_id:
        return settings.instance_id
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@contextlib.asynccontextmanager
async def holding(
    store: CheckpointStore,
    video_id: str,
    epoch: int,
    lease_s: float,
    *,
    heartbeat: Heartbeat | None = None,
    stall_s: float = math.inf,
) -> AsyncIterator[None]:
    """Renew the lease of attempt ``epoch`` every third of ``lease_s`` while the block runs
    and ``heartbeat`` beat within ``stall_s``. When a renewal finds the attempt taken over, the
    block is cancelled and ``StaleEpoch`` raised; when the heartbeat was silent too long, the
    block is cancelled and ``AttemptStalled`` raised; when the block fails, the lease is let
    go so another owner need not wait."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("holding() runs inside a task")
    lost: list[ReelsenseError] = []
    # Once the block has ended, a renewal that finds the lease lost must not cancel what the
    # task does on its way out (the renewal's Redis call may have lost its own cancel and
    # finished: ``core.tasks``).
    ended = False

    async def renew() -> None:
        go_on = True
        while go_on:
            await asyncio.sleep(lease_s / 3)
            go_on, error = await _renew_once(
                store, video_id, epoch, lease_s=lease_s, heartbeat=heartbeat, stall_s=stall_s
            )
            if error is not None:
                lost.append(error)
                if not ended:
                    task.cancel()

    keeper = asyncio.create_task(renew(), name=f"lease {video_id}")
    try:
        yield
    except BaseException as exc:
        ended = True
        await _stop(keeper)  # before letting go: a renewal in flight would take it back
        if not lost or isinstance(lost[0], AttemptStalled):
            await _release(store, video_id, epoch)
        if lost and isinstance(exc, asyncio.CancelledError) and task.uncancel() == 0:
            raise lost[0] from None
        raise
    ended = True
    await _stop(keeper)


async def _renew_once(
    store: CheckpointStore,
    video_id: str,
    epoch: int,
    *,
    lease_s: float,
    heartbeat: Heartbeat | None,
    stall_s: float,
) -> tuple[bool, ReelsenseError | None]:
    """One renewal: whether renewals go on, and the error to stop the attempt with."""
    stalled = _stalled(heartbeat, stall_s, video_id, epoch)
    if stalled is not None:
        return False, stalled
    try:
        await store.renew(video_id, epoch, lease_s=lease_s)
    except StaleEpoch as exc:
        if await _outcome_recorded(store, video_id, epoch):
            return False, None  # the attempt is through (its outcome is in): nothing to stop
        log.warning("video %s: attempt %d was taken over; stopping it", video_id, epoch)
        return False, exc
    except ReelsenseError as exc:  # the store is down: the lease may lapse meanwhile
        log.warning("video %s: lease not renewed: %s", video_id, exc)
    return True, None


def _stalled(
    heartbeat: Heartbeat | None, stall_s: float, video_id: str, epoch: int
) -> AttemptStalled | None:
    if heartbeat is None or heartbeat.silent_s() <= stall_s:
        return None
    silent = heartbeat.silent_s()
    log.warning("video %s: attempt %d silent for %.0f s; stopping it", video_id, epoch, silent)
    return AttemptStalled(f"no progress for {silent:.0f} s (runtime.stall_s: {stall_s})")


async def _outcome_recorded(store: CheckpointStore, video_id: str, epoch: int) -> bool:
    """Whether attempt ``epoch`` itself recorded the video done or failed: a renewal between
    that and the end of the block finds the record no longer running, yet nothing took it."""
    try:
        status = await store.get(video_id)
    except ReelsenseError:
        return False
    return (
        status is not None
        and status.epoch == epoch
        and status.status in (VideoState.DONE, VideoState.FAILED)
    )


async def _stop(keeper: asyncio.Task[None]) -> None:
    await cancel_and_wait(keeper)


async def _release(store: CheckpointStore, video_id: str, epoch: int) -> None:
    with contextlib.suppress(ReelsenseError, TimeoutError):
        async with asyncio.timeout(_RELEASE_TIMEOUT_S):
            await store.renew(video_id, epoch, lease_s=0)


async def claim_when_free(
    store: CheckpointStore,
    ref: VideoRef,
    version: str,
    *,
    owner: str,
    lease_s: float,
    lost: int | None,
    wait_s: float | None = None,
) -> Claim:
    """The video claimed for ``owner``, once no other owner's attempt holds it: a live
    owner's attempt is waited for (it may finish the video: the claim then skips it), for
    ``wait_s`` at most (None: for as long as it lives); then ``VideoBusy`` is raised."""
    deadline = math.inf if wait_s is None else time.monotonic() + wait_s
    while True:
        try:
            return await store.claim(ref, version, owner=owner, lease_s=lease_s, lost_epoch=lost)
        except VideoBusy as busy:
            if time.monotonic() >= deadline:
                log.warning(
                    "video %s: %s for %.0f s; giving up for now", ref.video_id, busy, wait_s
                )
                raise
            log.info("video %s: %s; waiting", ref.video_id, busy)
            await asyncio.sleep(max(0.05, min(busy.retry_after or lease_s, lease_s / 4)))
