"""An attempt's lease on its video: who runs it, renewed while it runs, let go when it stops.

A claim takes over a running video only from its own owner or from one whose lease lapsed
(see ``CheckpointStore.claim``), so a member expelled from the consumer group while its
attempt still runs (a zombie) and the partition's new owner never both work on one video:
the new owner waits until the zombie finishes, stops or freezes past its lease. A renewal
that finds the attempt taken over ends the attempt's work at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator

from checkpoint.base import CheckpointStore, Claim, VideoState
from checkpoint.errors import StaleEpoch, VideoBusy
from core.config import RuntimeSettings
from core.errors import ReelsenseError
from core.records import VideoRef

log = logging.getLogger(__name__)

_RELEASE_TIMEOUT_S = 2.0


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
    store: CheckpointStore, video_id: str, epoch: int, lease_s: float
) -> AsyncIterator[None]:
    """Renew the lease of attempt ``epoch`` every third of ``lease_s`` while the block runs.
    When a renewal finds the attempt taken over, the block is cancelled and ``StaleEpoch``
    raised; when the block fails, the lease is let go so another owner need not wait."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("holding() runs inside a task")
    lost: list[StaleEpoch] = []

    async def renew() -> None:
        while True:
            await asyncio.sleep(lease_s / 3)
            try:
                await store.renew(video_id, epoch, lease_s=lease_s)
            except StaleEpoch as exc:
                if await _outcome_recorded(store, video_id, epoch):
                    return  # the attempt is through (its outcome is in): nothing to stop
                log.warning("video %s: attempt %d was taken over; stopping it", video_id, epoch)
                lost.append(exc)
                task.cancel()
                return
            except ReelsenseError as exc:  # the store is down: the lease may lapse meanwhile
                log.warning("video %s: lease not renewed: %s", video_id, exc)

    keeper = asyncio.create_task(renew(), name=f"lease {video_id}")
    try:
        yield
    except BaseException as exc:
        await _stop(keeper)  # before letting go: a renewal in flight would take it back
        if not lost:
            await _release(store, video_id, epoch)
        elif isinstance(exc, asyncio.CancelledError) and task.uncancel() == 0:
            raise lost[0] from None
        raise
    await _stop(keeper)


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
    keeper.cancel()
    await asyncio.gather(keeper, return_exceptions=True)


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
) -> Claim:
    """The video claimed for ``owner``, once no other owner's attempt holds it: a live
    owner's attempt is waited for (it may finish the video: the claim then skips it)."""
    while True:
        try:
            return await store.claim(ref, version, owner=owner, lease_s=lease_s, lost_epoch=lost)
        except VideoBusy as busy:
            log.info("video %s: %s; waiting", ref.video_id, busy)
            await asyncio.sleep(max(0.05, min(busy.retry_after or lease_s, lease_s / 4)))
