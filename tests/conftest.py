"""Real services for the tests, started once per session on 127.0.0.1 and stopped by PID.

Tansu (Kafka protocol), redis-server and moto's S3 server run as local processes. Where a
Docker engine exists, testcontainers could provide Apache Kafka and Redis instead; this
machine has none, so the local binaries are the default and nothing is skipped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from devkit.services import LocalProcess, moto_server, redis_server, tansu

if TYPE_CHECKING:
    from devkit.service_run import ServiceRun

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Speech in the tests is English unless a test says otherwise: Whisper tiny.en hears it at a
# third of the default base's CPU. The tests of languages name base.
os.environ.setdefault("REELSENSE_ASR_MODEL", "tiny.en")


# Modules that start several service processes each: under xdist they are one unit of work,
# run one after another on one worker, so two of them never share the 2 cores.
EXCLUSIVE_MODULES = frozenset(
    {
        "tests/bench/perf/test_pipeline_quick.py",
        "tests/e2e/test_cluster.py",
        "tests/e2e/test_restart.py",
        "tests/recovery/test_chaos_reduced.py",
        "tests/recovery/test_rebalance.py",
        "tests/recovery/test_redis_failover.py",
        "tests/recovery/test_redis_flush.py",
        "tests/recovery/test_resume_chunks.py",
    }
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Units of work for ``pytest -n 2`` (``make test``): a module runs whole on one worker,
    so its module fixtures start once; the ``EXCLUSIVE_MODULES`` are one unit together."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "exclusive" if module in EXCLUSIVE_MODULES else module

    return ModuleUnits(config, log)


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("services")


def _docker_engine() -> bool:
    """True where a Docker engine answers (then testcontainers provides Kafka and Redis)."""
    if os.environ.get("REELSENSE_TEST_DOCKER") != "1":
        return False
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap(services_dir: Path) -> Iterator[str]:
    if _docker_engine():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    with tansu(services_dir / "tansu") as broker:
        yield f"127.0.0.1:{broker.port}"


@pytest.fixture(scope="session")
def redis_process(services_dir: Path) -> Iterator[LocalProcess]:
    """A local redis-server, for tests that stop and restart it."""
    with redis_server(services_dir / "redis") as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(services_dir: Path) -> Iterator[str]:
    if _docker_engine():
        from testcontainers.redis import RedisContainer

        # AOF on: the store refuses a Redis that cannot confirm writes on disk.
        with RedisContainer("redis:7.4").with_command("redis-server --appendonly yes") as redis:
            host, port = redis.get_container_host_ip(), redis.get_exposed_port(6379)
            yield f"redis://{host}:{port}/0"
        return
    with redis_server(services_dir / "redis-shared") as server:
        yield f"redis://127.0.0.1:{server.port}/0"


@pytest.fixture(scope="session")
def s3_endpoint(services_dir: Path) -> Iterator[str]:
    """A real S3 HTTP endpoint (moto server) with throwaway credentials."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with moto_server(services_dir / "moto") as server:
        yield f"http://127.0.0.1:{server.port}"


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray for the whole session, with a private temp dir and no dashboard (short:
    Ray puts its sockets there, and a test worker's own temp path is already long)."""
    import ray

    ray_tmp = Path(os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="rs-t-", dir="/tmp"))
    ray_tmp.mkdir(parents=True, exist_ok=True)
    os.environ["RAY_TMPDIR"] = str(ray_tmp)
    ray.init(
        include_dashboard=False,
        num_cpus=2,
        namespace=f"test-{uuid.uuid4().hex[:6]}",
        _temp_dir=str(ray_tmp),
        log_to_driver=False,
    )
    yield
    ray.shutdown()
    if ray_tmp.name.startswith("rs-t-"):
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture
def unique() -> str:
    """A short random suffix for topic, group, key and table names of one test."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
async def service_run(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, unique: str
) -> AsyncIterator[ServiceRun]:
    """A throwaway run of the service for one test: its config (names unique to the test,
    folders under ``tmp_path``), a webhook receiver with the secret, a checkpoint store. The
    test starts the service (in this process or as processes); the run stops it afterwards."""
    from devkit.service_run import ServiceRun  # Lance, Kafka and Redis clients: only here

    async with ServiceRun(
        tmp_path, bootstrap=kafka_bootstrap, redis_url=redis_url, unique=unique
    ) as run:
        yield run


@pytest.fixture
def serve_apps(ray_session: None) -> Iterator[None]:
    """Ray Serve for one test: whatever it deployed is shut down afterwards, so the next test
    starts Serve afresh (its own HTTP port, no route prefix taken)."""
    yield
    from ray import serve

    serve.shutdown()
