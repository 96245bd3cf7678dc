"""One writer per Lance root, enforced: a Redis lease with a fencing token.

Two service processes, or two Ray clusters side by side during an upgrade, may each run a
``SinkWriter`` on the same tables. The lease makes one of them the writer:

- ``hold`` takes the lease, with a fresh token from a counter that only grows (INCR), or, when
  this writer has it, confirms in one script that its token is still the lease's and extends
  it. The writer calls it right before every commit of every table, so a writer whose token
  was superseded, or whose lease lapsed and was taken, commits nothing more: its batch fails
  with ``NoWriterLease``, retryable, and the video's attempt is retried.
- A thread renews the lease every third of its period while it is held. The writer lets it go
  whenever it has nothing left to write (``let_go``), and ``close`` releases it, so another
  writer with results waiting takes it at once: two writers alternate, batch by batch, and
  never commit at the same time.
- A writer without the lease waits for it at most one lease period (as long as a dead holder
  keeps it), then fails retryably, saying how long the holder's lease has left.
- The lease fences processes: its owner names the process, so the writers of one process on
  one root share it (a service builds one writer per process; tests and sequential runs build
  several in turn), and it is released when the last of them closes.

A check is not the commit, though: a process frozen for longer than the lease between its
check and its commit (a pause, SIGSTOP, a suspended VM) can commit after another writer took
over. Lance closes that window where it matters, duplicate rows: the tables declare their keys
as primary key (``sinks.lance_table``), and Lance refuses a commit that inserts a key a
concurrent commit inserted. Measured with pylance 14.0.2, two processes merging the same 50
new keys from the same version, 10 tries each way: with the key declared the later commit
conflicts every time ("Too many concurrent writers" with ``conflict_retries=0``; with retries,
it is redone as an update) and no key is doubled; undeclared, both commits succeed and every
key is doubled every time. ``tests/sinks/test_writer_lease.py`` shows both the lease and that.

Key layout (``P`` is ``RedisSettings.key_prefix``; on Redis Cluster give it a hash tag, the
scripts touch two keys)::

    P:writer-lease:{root}          hash     token, owner; expires unless renewed
    P:writer-lease:{root}:token    counter  the last token handed out (never expires)
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import redis

from checkpoint.redis_clients import retrying, sync_client
from checkpoint.scripts import load_script
from core.config import RedisSettings, StorageSettings
from sinks.errors import SinkUnavailable

log = logging.getLogger(__name__)

_OWNERS: dict[int, str] = {}  # pid -> the process's name in leases (a forked child has its own)
_OPEN: Counter[tuple[str, str, str]] = Counter()  # (url, key, owner) -> leases open in process
_OPEN_LOCK = threading.Lock()


def process_owner() -> str:
    """This process's name in the leases it takes: host, pid and a random part (a pid is
    reused, and containers share pids)."""
    pid = os.getpid()
    return _OWNERS.setdefault(pid, f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}")


class NoWriterLease(SinkUnavailable):
    """This writer does not hold the tables' lease, so it committed nothing: it lost the lease
    (``writer_lease_lost``), another writer holds it (``writer_lease_busy``), or Redis cannot
    confirm it (``writer_lease_unavailable``). Retry: the lease's holder writes it."""

    code = "writer_lease_lost"


def lease_key(key_prefix: str, lance_uri: str) -> str:
    """The lease of the tables under ``lance_uri``: a local folder counts by its absolute path
    (two processes naming it from different working folders share it)."""
    root = lance_uri.rstrip("/") if "://" in lance_uri else os.path.abspath(lance_uri)
    return f"{key_prefix}:writer-lease:{root}"


@contextlib.contextmanager
def _boundary(key: str) -> Iterator[None]:
    """Any Redis failure as retryable: a lease that cannot be confirmed is never a reason to
    fail a video, only to wait (the attempt policy bounds how long)."""
    try:
        yield
    except (redis.RedisError, OSError) as exc:
        raise NoWriterLease(
            f"{key}: redis cannot confirm the writer lease: {exc}",
            code="writer_lease_unavailable",
            retry_after=1.0,
        ) from exc


class WriterLease:
    """The lease of one Lance root for one writer: taken, checked, renewed, released."""

    def __init__(
        self,
        settings: RedisSettings,
        lance_uri: str,
        *,
        lease_s: float = 15.0,
        owner: str | None = None,
    ) -> None:
        """``owner`` names the writer in the lease; leases of one owner share it (by default,
        every lease of this process, ``process_owner``)."""
        self.key = lease_key(settings.key_prefix, lance_uri)
        self.lease_s = lease_s
        self.owner = owner or process_owner()
        self._shared = (settings.url, self.key, self.owner)
        with _OPEN_LOCK:
            _OPEN[self._shared] += 1
        self._closed = False
        # Every script is safe to repeat: a repeated check extends again, a repeated
        # acquisition finds the lease already this owner's and answers its token.
        self._client = sync_client(settings, decode_responses=True, retry=retrying())
        self._acquire, self._fence, self._release = (
            self._client.register_script(load_script(f"lease_{name}", alone=True))
            for name in ("acquire", "fence", "release")
        )
        self._token: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewal = threading.Thread(target=self._renew, name="writer-lease", daemon=True)
        self._renewal.start()

    @classmethod
    def from_settings(cls, storage: StorageSettings, redis_settings: RedisSettings) -> WriterLease:
        return cls(redis_settings, storage.lance_uri, lease_s=storage.writer_lease_s)

    @property
    def token(self) -> int | None:
        """The fencing token while this writer believes it holds the lease."""
        return self._token

    @property
    def _lease_ms(self) -> int:
        return max(1, round(self.lease_s * 1000))

    def hold(self, *, wait: bool = True) -> int:
        """The token, right after taking the lease or confirming and extending it: the lease
        is this writer's for ``lease_s`` from now. ``wait``: for a lease another writer holds,
        up to ``lease_s``. Raises ``NoWriterLease``."""
        token = self._token
        if token is None:
            return self.acquire(self.lease_s if wait else 0.0)
        self._check(token)
        return token

    def acquire(self, wait_s: float) -> int:
        """Take the lease with a new token, waiting up to ``wait_s`` while another holds it."""
        deadline = time.monotonic() + wait_s
        while True:
            with _boundary(self.key):
                reply: list[Any] = self._acquire(
                    keys=[self.key, f"{self.key}:token"], args=[self.owner, self._lease_ms]
                )
            if int(reply[0]) > 0:
                with self._lock:
                    self._token = int(reply[0])
                log.info("writer lease %s taken by %s, token %d", self.key, self.owner, reply[0])
                return int(reply[0])
            holder, left_s = str(reply[1]), max(int(reply[2]), 0) / 1000
            remaining = deadline - time.monotonic()
            pause = min(remaining, self.lease_s / 10, max(left_s, 0.05))
            if remaining <= 0 or self._stop.wait(pause):
                raise NoWriterLease(
                    f"{self.key}: {holder} holds the writer lease for {left_s:.1f}s more",
                    code="writer_lease_busy",
                    retry_after=max(left_s, 0.1),
                )

    def _check(self, token: int) -> None:
        with _boundary(self.key):
            reply: list[Any] = self._fence(
                keys=[self.key], args=[token, self.owner, self._lease_ms]
            )
        if int(reply[0]) == 1:
            return
        with self._lock:
            if self._token == token:
                self._token = None
        holder = f"{reply[1]} (token {reply[2]})" if reply[1] else "nobody"
        log.warning("writer lease %s with token %d lost; held by %s", self.key, token, holder)
        raise NoWriterLease(
            f"{self.key}: token {token} no longer holds the writer lease; held by {holder}",
            code="writer_lease_lost",
        )

    def _renew(self) -> None:
        failing = False
        while not self._stop.wait(self.lease_s / 3):
            token = self._token
            if token is None:
                continue
            try:
                self._check(token)
                failing = False
            except NoWriterLease as exc:
                # A lost lease is logged once by ``_check``; an outage once per outage.
                if exc.code == "writer_lease_unavailable" and not failing:
                    log.warning("renewing writer lease %s failed: %s", self.key, exc)
                failing = exc.code == "writer_lease_unavailable"

    def release(self) -> None:
        """Let the lease go now (if still this writer's), so the next writer takes it at once."""
        with self._lock:
            token, self._token = self._token, None
        if token is not None:
            with _boundary(self.key):
                self._release(keys=[self.key], args=[token, self.owner])

    def let_go(self) -> None:
        """Between batches: release the lease unless another writer of this process shares
        it, so that a writer elsewhere with results waiting commits meanwhile (two service
        processes on one machine each have a writer; both make progress, never at once)."""
        with _OPEN_LOCK:
            shared = _OPEN[self._shared] > 1
        if shared or self._token is None:
            return
        try:
            self.release()
        except NoWriterLease as exc:  # it lapses by itself
            log.info("writer lease %s not released between batches: %s", self.key, exc)

    def close(self) -> None:
        """Stop renewing and close the connection; the last of an owner's leases on the root
        releases it (a failure is logged: an unreleased lease lapses by itself)."""
        with _OPEN_LOCK:
            if self._closed:
                return
            self._closed = True
            _OPEN[self._shared] -= 1
            last = _OPEN[self._shared] == 0
            if last:
                del _OPEN[self._shared]
        self._stop.set()
        self._renewal.join()
        try:
            if last:
                self.release()
        except NoWriterLease as exc:
            log.warning("writer lease %s not released: %s", self.key, exc)
        self._client.close()
