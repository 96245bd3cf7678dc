"""The embedded stack: everything the service needs on one machine, no Docker.

Starts Tansu (Kafka protocol) and redis-server as local processes on 127.0.0.1, and gives the
``ServiceConfig`` that points the service at them with local folders for Lance and objects.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType

from core.config import ServiceConfig
from devkit.services import LocalProcess, free_port, redis_server, tansu

STATE_FILE = "stack.json"


class EmbeddedStack:
    """Broker + Redis under ``workdir``; a context manager that stops both by PID."""

    def __init__(self, workdir: Path, *, api_port: int | None = None) -> None:
        self.workdir = workdir.resolve()
        self.api_port = api_port or free_port()
        self.broker: LocalProcess = tansu(self.workdir / "tansu")
        self.redis: LocalProcess = redis_server(self.workdir / "redis")

    def start(self) -> EmbeddedStack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.broker.start()
        try:
            self.redis.start()
        except BaseException:
            self.broker.stop()
            raise
        (self.workdir / STATE_FILE).write_text(
            json.dumps({"bootstrap": self.bootstrap, "api": self.api_url, "pid": os.getpid()})
        )
        return self

    def stop(self) -> None:
        (self.workdir / STATE_FILE).unlink(missing_ok=True)
        self.broker.stop()
        self.redis.stop()

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

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
        base = base or ServiceConfig.load()
        data = self.workdir
        return ServiceConfig.load(
            kafka={**base.kafka.model_dump(), "bootstrap": self.bootstrap},
            redis={**base.redis.model_dump(), "url": self.redis_url},
            storage={
                **base.storage.model_dump(),
                "lance_uri": str(data / "lance"),
                "object_store_uri": str(data / "objects"),
            },
            limits={
                **base.limits.model_dump(),
                "file_roots": (*base.limits.file_roots, str(data / "samples"), str(Path.cwd())),
            },
            stages=base.stages.model_dump(),
            ray=base.ray.model_dump(),
            notify={**base.notify.model_dump(), "allow_private_targets": True},
            api={**base.api.model_dump(), "port": self.api_port},
            runtime={**base.runtime.model_dump(), "workdir": str(data / "work")},
        )


def read_state(workdir: Path) -> dict[str, str] | None:
    """Endpoints of a running ``reelsense dev`` stack, for ``submit``/``status``."""
    path = workdir / STATE_FILE
    if not path.exists():
        return None
    loaded: dict[str, str] = json.loads(path.read_text())
    return loaded
