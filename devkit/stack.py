"""The embedded stack: everything the service needs on one machine, no Docker.

Starts Tansu (Kafka protocol) and redis-server (AOF on) as local processes on 127.0.0.1, and
gives the ``ServiceConfig`` that points the service at them with local folders for Lance and
objects. With ``broker_on_s3`` Tansu keeps its log in a local S3 endpoint (moto) instead of
memory, so a broker killed and started again keeps every record and committed offset (the
crash soak restarts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Self

from core.config import ServiceConfig
from devkit.base import LocalPart
from devkit.services import LocalProcess, free_port, moto_server, redis_server, tansu

STATE_FILE = "stack.json"
BROKER_BUCKET = "broker"
S3_KEYS = {"AWS_ACCESS_KEY_ID": "devkit", "AWS_SECRET_ACCESS_KEY": "devkit"}
S3_REGION = "us-east-1"


class EmbeddedStack(LocalPart):
    """Broker + Redis (+ moto with ``broker_on_s3``) under ``workdir``, stopped by PID."""

    def __init__(
        self, workdir: Path, *, api_port: int | None = None, broker_on_s3: bool = False
    ) -> None:
        self.workdir = workdir.resolve()
        self.api_port = api_port or free_port()
        self.moto = moto_server(self.workdir / "moto") if broker_on_s3 else None
        storage = f"s3://{BROKER_BUCKET}/" if broker_on_s3 else "memory://tansu/"
        self.broker: LocalProcess = tansu(self.workdir / "tansu", storage=storage)
        self.redis: LocalProcess = redis_server(self.workdir / "redis")

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            if self.moto is not None:
                self._start_broker_storage(self.moto)
            self.broker.start()
            self.redis.start()
        except BaseException:
            self.stop()
            raise
        (self.workdir / STATE_FILE).write_text(
            json.dumps(
                {
                    "bootstrap": self.bootstrap,
                    "api": self.api_url,
                    "redis": self.redis_url,
                    "pid": os.getpid(),
                }
            )
        )
        return self

    def _start_broker_storage(self, moto: LocalProcess) -> None:
        import boto3

        moto.start()
        endpoint = f"http://127.0.0.1:{moto.port}"
        keys = {name.lower(): value for name, value in S3_KEYS.items()}
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=S3_REGION, **keys)
        s3.create_bucket(Bucket=BROKER_BUCKET)
        # What Tansu's object store client reads: keys, region, endpoint, plain HTTP allowed.
        self.broker.env.update(
            {
                **S3_KEYS,
                "AWS_DEFAULT_REGION": S3_REGION,
                "AWS_ENDPOINT": endpoint,
                "AWS_ALLOW_HTTP": "true",
            }
        )

    def stop(self) -> None:
        """Stops every part, even when stopping one of them fails."""
        (self.workdir / STATE_FILE).unlink(missing_ok=True)
        for part in (self.broker, self.redis, self.moto):
            if part is not None:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    part.stop()

    async def bounce(self, part: LocalProcess, down_s: float) -> None:
        """kill -9 of ``part``, down for ``down_s``, started again with the same argv (port,
        data), as when a broker or Redis pod crashes and comes back."""
        await asyncio.to_thread(part.kill)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(part.start, timeout_s=60)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis.port}/0"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def config(self, base: ServiceConfig | None = None) -> ServiceConfig:
        """``base`` (defaults from the environment) pointed at this stack."""
        endpoints = {"bootstrap": self.bootstrap, "redis": self.redis_url, "api": self.api_url}
        return stack_config(self.workdir, endpoints, base)


def stack_config(
    workdir: Path, endpoints: dict[str, str], base: ServiceConfig | None = None
) -> ServiceConfig:
    """``base`` pointed at the stack under ``workdir`` with these endpoints (as ``stack.json``
    holds them). Only what ``base`` set is carried over, so what it left unset stays the
    service's default (the placement profile fills it in: ``runtime.placement``)."""
    base = base or ServiceConfig.load()

    def given(section: str) -> dict[str, Any]:
        return getattr(base, section).model_dump(exclude_unset=True)  # type: ignore[no-any-return]

    return ServiceConfig.load(
        kafka={**given("kafka"), "bootstrap": endpoints["bootstrap"]},
        redis={**given("redis"), "url": endpoints["redis"]},
        storage={
            **given("storage"),
            "lance_uri": str(workdir / "lance"),
            "object_store_uri": str(workdir / "objects"),
        },
        limits={
            **given("limits"),
            "file_roots": (*base.limits.file_roots, str(workdir / "samples"), str(Path.cwd())),
        },
        stages=given("stages"),
        asr=given("asr"),
        ray=given("ray"),
        notify={**given("notify"), "allow_private_targets": True},
        api={**given("api"), "port": int(endpoints["api"].rsplit(":", 1)[1])},
        runtime={**given("runtime"), "workdir": str(workdir / "work")},
        backfill=given("backfill"),
    )


def read_state(workdir: Path) -> dict[str, str] | None:
    """Endpoints of a running ``reelsense dev`` stack, for ``submit``/``status``."""
    path = workdir / STATE_FILE
    if not path.exists():
        return None
    loaded: dict[str, str] = json.loads(path.read_text())
    return loaded
