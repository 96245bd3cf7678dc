"""The parts of the crash soak: its stack (moto, Tansu on S3, Redis with AOF), its sample
videos and its service processes, each started and stopped by PID."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import boto3

from devkit.samples import Scene, write_video
from devkit.services import LocalProcess, moto_server, redis_server, tansu
from tests.e2e.support import WORDS, kill_service, start_service, stop_service

log = logging.getLogger("bench.chaos")

BUCKET = "broker"
S3_KEYS = {"AWS_ACCESS_KEY_ID": "chaos", "AWS_SECRET_ACCESS_KEY": "chaos"}
REGION = "us-east-1"
VIDEO_FPS = 10


@dataclass
class ChaosStack:
    """moto (S3), Tansu on that S3, redis-server with AOF; restartable on the same ports."""

    root: Path
    moto: LocalProcess = field(init=False)
    broker: LocalProcess = field(init=False)
    redis: LocalProcess = field(init=False)

    def __post_init__(self) -> None:
        self.moto = moto_server(self.root / "moto")
        self.broker = tansu(self.root / "tansu", storage=f"s3://{BUCKET}/")
        self.redis = redis_server(self.root / "redis", aof=True)

    def start(self) -> ChaosStack:
        self.moto.start()
        endpoint = f"http://127.0.0.1:{self.moto.port}"
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, **_s3_keys())
        s3.create_bucket(Bucket=BUCKET)
        # What Tansu's object store client reads: keys, region, endpoint, plain HTTP allowed.
        self.broker.env.update(
            {
                **S3_KEYS,
                "AWS_DEFAULT_REGION": REGION,
                "AWS_ENDPOINT": endpoint,
                "AWS_ALLOW_HTTP": "true",
            }
        )
        self.broker.start()
        self.redis.start()
        return self

    def stop(self) -> None:
        for process in (self.broker, self.redis, self.moto):
            with contextlib.suppress(Exception):
                process.stop()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis.port}/0"

    async def bounce(self, process: LocalProcess, down_s: float) -> None:
        """kill -9, stay down ``down_s``, start again with the same argv (port, data)."""
        await asyncio.to_thread(process.kill)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(process.start, timeout_s=60)


def _s3_keys() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_KEYS["AWS_SECRET_ACCESS_KEY"],
    }


def write_sample_videos(
    folder: Path, count: int, rng: random.Random, *, seconds: tuple[float, float] = (2.0, 20.0)
) -> dict[str, tuple[Path, int]]:
    """``count`` 640x360 videos, each between ``seconds`` long, of 1-4 scenes of text.
    Returns video id -> (path, frames in the file)."""
    videos: dict[str, tuple[Path, int]] = {}
    for i in range(count):
        length = rng.uniform(*seconds)
        parts = rng.randint(1, 4)
        scenes = [
            Scene(
                lines=(f"{rng.choice(WORDS)} {i:03d}", f"PART {p + 1}"),
                seconds=length / parts,
                background=(rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255)),
            )
            for p in range(parts)
        ]
        video_id = f"chaos-{i:03d}"
        path = write_video(folder / f"{video_id}.mp4", scenes, fps=VIDEO_FPS, size=(640, 360))
        frames = sum(max(1, round(scene.seconds * VIDEO_FPS)) for scene in scenes)
        videos[video_id] = (path, frames)
    return videos


class ServiceSet:
    """The service processes of the soak (``a`` always, ``b`` while it has joined)."""

    def __init__(self, root: Path, configs: dict[str, Path], secret: str) -> None:
        self.root = root
        self.configs = configs
        self.secret = secret
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ray_dirs: dict[str, Path] = {}
        self.unexpected_exits: list[str] = []

    def start(self, name: str) -> None:
        ray_tmp = Path(tempfile.mkdtemp(prefix="rs-chaos-"))  # short: Ray's socket paths
        self.ray_dirs[name] = ray_tmp
        log_path = self.root / "logs" / f"service-{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as out:
            out.write(f"\n=== start {name} at {time.strftime('%H:%M:%S')} ===\n")
        self.processes[name] = start_service(
            self.configs[name], self.secret, log_path, ray_tmp=ray_tmp
        )

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        kill_service(process, ray_tmp=self.ray_dirs[name])
        shutil.rmtree(self.ray_dirs.pop(name), ignore_errors=True)

    def stop(self, name: str) -> int | None:
        process = self.processes.pop(name)
        code = stop_service(process, ray_tmp=self.ray_dirs[name])
        shutil.rmtree(self.ray_dirs.pop(name), ignore_errors=True)
        return code

    def restart_exited(self) -> None:
        """A service that exited on its own is a finding; it is restarted so the run goes on."""
        for name, process in list(self.processes.items()):
            if process.poll() is not None:
                self.unexpected_exits.append(f"{name} exited with {process.returncode}")
                log.warning("service %s exited with %s; restarting", name, process.returncode)
                self.kill(name)
                self.start(name)

    def stop_all(self) -> None:
        for name in list(self.processes):
            with contextlib.suppress(Exception):
                self.stop(name)
