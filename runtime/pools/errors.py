"""What a call into the pools raised, as the orchestration decides on it.

A stage's own error comes back wrapped in Ray's ``RayTaskError``: it is unwrapped, so its
reason code and kind (retry or not) survive the trip. A replica or the writer that died, or
that Serve cannot reach, is an outage of the service's own parts, not a fault of the video in
hand: ``PoolUnavailable``, which the processor waits out within ``runtime.outage_window_s``
without using up the video's attempts (Serve starts the lost replica again meanwhile). So is a
call that has no answer within its deadline (``ray.call_timeout_s``, ``ray.write_timeout_s``):
a replica that hangs holds the call that long, not for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError

from core.errors import DependencyUnavailable, ReelsenseError

_UNREACHABLE = (RayActorError, DeploymentUnavailableError, ReplicaUnavailableError)


class PoolUnavailable(DependencyUnavailable):
    """A stage replica or the sink writer is gone or cannot be reached."""

    code = "pool_unavailable"


def from_ray(exc: BaseException) -> BaseException:
    """The error to act on for ``exc`` raised by a call into the pools."""
    if isinstance(exc, RayTaskError):
        cause = getattr(exc, "cause", None)
        return cause if isinstance(cause, ReelsenseError) else exc
    if isinstance(exc, _UNREACHABLE):
        return PoolUnavailable(f"{type(exc).__name__}: {exc}", retry_after=1.0)
    return exc


@contextlib.asynccontextmanager
async def pool_call(what: str, timeout_s: float) -> AsyncIterator[None]:
    """Around a call into the pools: what it raises, as ``from_ray`` says, and no answer
    within ``timeout_s`` (a replica that hangs) as ``PoolUnavailable`` too."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except TimeoutError:
        raise PoolUnavailable(
            f"{what}: no answer within {timeout_s} s", code="pool_call_timeout", retry_after=1.0
        ) from None
    except (RayTaskError, *_UNREACHABLE) as exc:
        raise from_ray(exc) from None
