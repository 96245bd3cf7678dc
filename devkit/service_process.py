"""One ``reelsense serve`` process with its own local Ray (or joining a cluster's, when its
config sets ``ray.address``), for tests and the crash soak.

It runs in a session of its own and is stopped by PID with everything it started: Ray's GCS,
raylet and workers may sit in sessions of their own, and a killed service leaves them behind
(re-parented to init), so they are found by the Ray temp folder they use as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Self

import httpx
import psutil

from devkit.base import LocalPart


class ServiceProcess(LocalPart):
    """``reelsense serve --config config_path``, its output appended to ``log_path``.

    Every start gets a fresh Ray temp folder (short: Ray puts sockets there), removed when
    the process is killed or stopped. ``secret`` signs the webhooks (it travels in the
    environment, never in the config file); ``api_port`` is where its API answers; ``env``
    goes into its environment too (a Ray cluster's token, see ``devkit.ray_nodes``).
    """

    def __init__(
        self,
        config_path: Path,
        secret: str,
        log_path: Path,
        *,
        api_port: int,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.config_path = config_path
        self.secret = secret
        self.log_path = log_path
        self.api_port = api_port
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.ray_tmp: Path | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exited(self) -> int | None:
        """The exit code of a process that ended on its own (not stopped or killed from
        here, which forgets it); None while it runs or when none was started."""
        return None if self.process is None else self.process.poll()

    def start(self) -> Self:
        """Start the process; it answers on its API once Ray and the stage pools are up (see
        ``wait_healthy``)."""
        if self.running:
            return self
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp"))
        env = {**os.environ, **self.env}
        env["REELSENSE_NOTIFY_WEBHOOK_SECRETS"] = json.dumps([self.secret])
        env["RAY_TMPDIR"] = str(self.ray_tmp)  # not the one of a Ray this process may hold
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"\n=== start at {time.strftime('%H:%M:%S')} ===\n".encode())
            out.flush()
            self.process = subprocess.Popen(  # noqa: S603 - our own CLI, argv built here
                [sys.executable, "-m", "cli.main", "serve", "--config", str(self.config_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        return self

    def tree(self) -> list[psutil.Process]:
        """The service process and everything it started (Ray's GCS, raylet, workers)."""
        if self.process is None:
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> None:
        """kill -9 of the service and everything it started, as when a pod dies."""
        if self.process is None:
            return
        tree = self.tree()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        tree += self._left_behind()
        for member in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        psutil.wait_procs(tree, timeout=10)
        self.process = None
        if self.ray_tmp is not None:
            shutil.rmtree(self.ray_tmp, ignore_errors=True)
            self.ray_tmp = None

    def stop(self, *, timeout_s: float = 120) -> int | None:
        """SIGTERM (a graceful stop), then kill -9 of whatever is left. The exit code of the
        graceful stop; None if it had to be killed (or was never started)."""
        if self.process is None:
            return None
        code = self.process.poll()
        if code is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                code = self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                code = None
        self.kill()
        return code

    def _left_behind(self) -> list[psutil.Process]:
        """Processes of this service's Ray that escaped its process tree."""
        return [] if self.ray_tmp is None else processes_of_ray_folder(self.ray_tmp)

    def replica(self, deployment: str) -> psutil.Process | None:
        """The Serve replica process of ``deployment`` (e.g. ``ocr``) under this service."""
        return replica_among(self.tree(), deployment)

    async def wait_healthy(self, *, timeout_s: float = 240) -> None:
        """Until the API answers /healthz (its stage pools and consumer start with it);
        TimeoutError if it does not in time."""
        url = f"http://127.0.0.1:{self.api_port}/healthz"
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url)).status_code == 200:
                        return
                await asyncio.sleep(0.5)
        raise TimeoutError(f"the service on port {self.api_port} did not become healthy")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


def replica_among(processes: Iterable[psutil.Process], deployment: str) -> psutil.Process | None:
    """Of ``processes``, the Serve replica of the pools' ``deployment`` (e.g. ``ocr``)."""
    suffix = f"ServeReplica:reelsense-pools:{deployment}"
    for member in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            title = " ".join(member.cmdline()) or member.name()
            if title.startswith("ray::") and title.split()[0].endswith(suffix):
                return member
    return None


def processes_of_ray_folder(folder: Path) -> list[psutil.Process]:
    """The processes of the Ray whose temp folder is ``folder`` (named on their command line,
    or their ``RAY_TMPDIR``), this one excepted: what is left of a Ray whose parent died."""
    marker = str(folder)
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.info["cmdline"] or ()
            if (
                any(marker in part for part in cmdline)
                or proc.environ().get("RAY_TMPDIR") == marker
            ):
                found.append(proc)
    return [proc for proc in found if proc.pid != os.getpid()]
