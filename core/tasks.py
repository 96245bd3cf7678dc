"""Ending background tasks for sure.

Under Python 3.11, ``asyncio.wait_for`` hands back the wrapped call's result when that call
finishes in the same loop step as a cancel arrives, and the cancel is lost (fixed in 3.12).
redis-py wraps every socket write in ``wait_for`` when a socket timeout is set, so a loop that
talks to Redis misses about one cancel in five (measured on a loop of PINGs); one ``cancel()``
and an unbounded wait then hang its owner for good. ``cancel_and_wait`` cancels again until
the task has ended, a second apart by default: long enough for what a cancelled task does on
its way out (closing a subscription, releasing a connection) not to be cut by the next cancel.
"""

from __future__ import annotations

import asyncio
from typing import Any

RECANCEL_EVERY_S = 1.0


async def cancel_and_wait(*tasks: asyncio.Task[Any], every_s: float = RECANCEL_EVERY_S) -> None:
    """Cancel ``tasks`` and return once every one has ended, cancelling again each
    ``every_s`` one still runs. What they raised is taken and dropped (their owners are
    stopping them), as ``gather(..., return_exceptions=True)`` would."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=every_s)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # marks it retrieved: no "never retrieved" warning
