"""Rate limits of the API process, per tenant."""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from collections.abc import Callable


class RateLimit:
    """At most ``count`` calls in any ``per_s`` seconds for each key (a tenant), counted in
    this process."""

    def __init__(
        self, count: int, per_s: float = 60.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.count = count
        self.per_s = per_s
        self._clock = clock
        self._calls: defaultdict[str, deque[float]] = defaultdict(deque)

    def take(self, key: str) -> float | None:
        """Count one call of ``key``; None when it is allowed, else the seconds until one is
        (the call is not counted then)."""
        now = self._clock()
        calls = self._calls[key]
        while calls and calls[0] <= now - self.per_s:
            calls.popleft()
        if len(calls) >= self.count:
            return max(0.0, calls[0] + self.per_s - now)
        calls.append(now)
        return None

    def retry_after(self, wait_s: float) -> str:
        """``wait_s`` as a Retry-After header value (whole seconds, at least 1)."""
        return str(max(1, math.ceil(wait_s)))
