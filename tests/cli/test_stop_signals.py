"""A stop signal at any moment of a service command's life ends it gracefully: exit 0, and
every process it started (broker, Redis, Ray's GCS, raylet and workers) stopped.

Moments tried: while the embedded stack starts, while ``ray.init`` runs, while the stage pools
deploy, and once up with the signal sent to the whole process group (as ``kill -- -PGID``, a
supervisor or a control-group stop sends it, reaching Ray's own processes too)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from devkit.service_process import ServiceProcess, processes_of_ray_folder
from devkit.service_run import ServiceRun
from devkit.stack import read_state

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STOP_WITHIN_S = 90.0


def _until(condition: Callable[[], bool], what: str, *, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"never {what}")


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _names(pid: int) -> set[str]:
    names = set()
    for proc in _tree(pid)[1:]:
        try:
            names.add(proc.name())
        except psutil.NoSuchProcess:
            continue
    return names


def _left(processes: list[psutil.Process]) -> list[str]:
    left = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{proc.pid} {proc.name()}")
        except psutil.NoSuchProcess:
            continue
    return left


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A Ray temp folder of the command's own, to find its Ray's processes by."""
    folder = Path(tempfile.mkdtemp(prefix="rs-s-", dir="/tmp"))
    yield folder
    for proc in processes_of_ray_folder(folder):  # what a failed test left: not the next's
        proc.kill()


class DevCommand:
    """``reelsense dev`` in a session of its own, as a terminal or a supervisor runs it."""

    def __init__(self, workdir: Path, ray_tmp: Path, log: Path) -> None:
        self.workdir = workdir
        self.ray_tmp = ray_tmp
        env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "dev", "--workdir", str(workdir)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.log = log

    def healthy(self) -> bool:
        state = read_state(self.workdir)
        if state is None:
            return False
        try:
            return httpx.get(f"{state['api']}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop_by(self, send: Callable[[int], None]) -> tuple[int | None, list[str]]:
        """Send a signal (``send(pid)``); the exit code and what is left running after."""
        everything = _tree(self.process.pid)
        send(self.process.pid)
        try:
            code: int | None = self.process.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            code = None
        left = _left(everything) + _left(processes_of_ray_folder(self.ray_tmp))
        for proc in everything:  # what a failed stop left: not the next test's
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        return code, left


def test_dev_stopped_with_its_whole_group_once_up(tmp_path: Path, ray_tmp: Path) -> None:
    dev = DevCommand(tmp_path / "dev", ray_tmp, tmp_path / "dev.log")
    _until(dev.healthy, "healthy")
    code, left = dev.stop_by(lambda pid: os.killpg(pid, signal.SIGTERM))
    assert code == 0, dev.log.read_text()[-3000:]
    assert left == []


def test_dev_stopped_while_its_stack_starts(tmp_path: Path, ray_tmp: Path) -> None:
    dev = DevCommand(tmp_path / "dev", ray_tmp, tmp_path / "dev.log")
    _until(lambda: bool(_names(dev.process.pid)), "started the broker")
    code, left = dev.stop_by(lambda pid: os.kill(pid, signal.SIGTERM))
    assert code == 0, dev.log.read_text()[-3000:]
    assert left == []
    assert not (tmp_path / "dev" / "stack.json").exists()


def _serve_stopped_when(run: ServiceRun, moment: Callable[[ServiceProcess], bool]) -> None:
    service = run.start_process()
    _until(lambda: moment(service), "reached the moment")
    assert service.ray_tmp is not None
    ray_folder = service.ray_tmp
    everything = service.tree()
    code = service.stop(timeout_s=STOP_WITHIN_S)
    assert code == 0, service.log_tail()
    assert _left(everything) == []
    assert _left(processes_of_ray_folder(ray_folder)) == []


def _ray_starting(service: ServiceProcess) -> bool:
    """Ray's session folder is there (``ray.init`` has begun), its GCS not yet answering."""
    assert service.ray_tmp is not None
    return any(service.ray_tmp.glob("session_*"))


def _pools_deploying(service: ServiceProcess) -> bool:
    """A stage replica runs, the service is not ready yet."""
    return service.replica("ingest") is not None


async def test_serve_stopped_while_ray_starts(service_run: ServiceRun) -> None:
    await asyncio.to_thread(_serve_stopped_when, service_run, _ray_starting)


async def test_serve_stopped_while_its_pools_deploy(service_run: ServiceRun) -> None:
    await asyncio.to_thread(_serve_stopped_when, service_run, _pools_deploying)
