"""``reelsense submit --upload``: the file goes into the configured object store (S3 on a real
moto server, or a folder), and the event on the real (Tansu) broker names it there. When the
file or the store fails, nothing is published."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from cli.main import main as cli_main
from consumers.admin import ensure_topics
from consumers.events import parse_event
from devkit.services import free_port
from devkit.workload import read_records

# Above the S3 store's part size (16 MiB), so the upload goes in several parts.
LARGE = 16 * 1024 * 1024 + 12345


def write_config(path: Path, topic: str, storage: dict[str, Any]) -> Path:
    """A service config file naming the topic and the object store, as an operator's is."""
    path.write_text(yaml.safe_dump({"kafka": {"topic": topic}, "storage": storage}))
    return path


def s3_storage(bucket: str, endpoint: str) -> dict[str, Any]:
    return {
        "object_store_uri": f"s3://{bucket}/objects",
        "s3_endpoint_url": endpoint,
        "s3_access_key_id": "testing",
        "s3_secret_access_key": "testing",
        "s3_connect_timeout_s": 1.0,
        "s3_max_attempts": 1,
    }


@pytest.fixture
def topic(kafka_bootstrap: str, unique: str) -> str:
    name = f"uploads-{unique}"
    asyncio.run(ensure_topics(kafka_bootstrap, {name: 1}))
    return name


@pytest.fixture
def bucket(s3_endpoint: str, unique: str) -> str:
    name = f"uploads-{unique}"
    s3(s3_endpoint).create_bucket(Bucket=name)
    return name


def s3(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def video_file(folder: Path, name: str, size: int) -> Path:
    path = folder / name
    path.write_bytes(os.urandom(size))
    return path


def published(bootstrap: str, topic: str) -> int:
    """How many records the topic holds (the CLI has returned: what it sent is there)."""

    async def count() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        try:
            partition = TopicPartition(topic, 0)
            return int((await consumer.end_offsets([partition]))[partition])
        finally:
            await consumer.stop()

    return asyncio.run(count())


def the_event(bootstrap: str, topic: str) -> tuple[bytes | None, Any]:
    records = asyncio.run(read_records(bootstrap, topic, 1, timeout_s=30))
    assert len(records) == 1
    record = records[0]
    return record.key, parse_event(record.key, record.value, max_bytes=64 * 1024)


def test_upload_to_s3_publishes_the_objects_uri(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: str, bucket: str, topic: str
) -> None:
    """A file of several parts, a name that needs escaping, and the endpoint given on the
    command line over the file's (the compose stack's MinIO is ``minio:9000`` inside, and
    ``localhost:9000`` from the host)."""
    storage = {**s3_storage(bucket, f"http://127.0.0.1:{free_port()}")}
    config = write_config(tmp_path / "service.yaml", topic, storage)
    video = video_file(tmp_path, "my clip #1.mp4", LARGE)
    code = cli_main(
        [
            "submit",
            str(video),
            "--upload",
            "--video-id",
            "clip-1",
            "--tenant",
            "acme",
            "--config",
            str(config),
            "--s3-endpoint",
            s3_endpoint,
            "--bootstrap",
            kafka_bootstrap,
        ]
    )
    assert code == 0
    key, event = the_event(kafka_bootstrap, topic)
    assert key == b"clip-1"
    assert (event.video_id, event.tenant) == ("clip-1", "acme")
    assert event.uri == f"s3://{bucket}/objects/uploads/acme/clip-1/my_clip_1.mp4"
    stored = s3(s3_endpoint).get_object(
        Bucket=bucket, Key="objects/uploads/acme/clip-1/my_clip_1.mp4"
    )
    assert stored["ContentType"] == "video/mp4"
    assert stored["Body"].read() == video.read_bytes()


def test_upload_to_a_folder_publishes_a_file_uri(
    tmp_path: Path, kafka_bootstrap: str, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = tmp_path / "objects"
    config = write_config(tmp_path / "service.yaml", topic, {"object_store_uri": str(objects)})
    video = video_file(tmp_path, "short clip #2.webm", 4096)
    code = cli_main(
        ["submit", str(video), "--upload", "--config", str(config), "--bootstrap", kafka_bootstrap]
    )
    assert code == 0
    video_id = capsys.readouterr().out.strip()
    assert video_id.startswith("short_clip_2-")  # from the file's name, made a valid id
    _, event = the_event(kafka_bootstrap, topic)
    stored = objects / "uploads" / "default" / video_id / "short_clip_2.webm"
    assert event.video_id == video_id
    assert event.uri == stored.resolve().as_uri()
    assert stored.read_bytes() == video.read_bytes()
    assert not [p for p in stored.parent.iterdir() if p.name.startswith(".tmp-")]


def test_a_missing_file_or_a_bad_event_publishes_nothing(
    tmp_path: Path, kafka_bootstrap: str, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "service.yaml", topic, {"object_store_uri": str(tmp_path)})
    argv = ["submit", "--upload", "--config", str(config), "--bootstrap", kafka_bootstrap]
    assert cli_main([*argv, str(tmp_path / "nowhere.mp4")]) == 2
    assert "nowhere.mp4: no such file" in capsys.readouterr().err
    assert cli_main([*argv, "s3://somewhere/else.mp4"]) == 2
    assert "--upload takes a local file" in capsys.readouterr().err
    video = video_file(tmp_path, "clip.mp4", 1024)
    assert cli_main([*argv, str(video), "--video-id", "no spaces allowed"]) == 2
    assert "not a valid event" in capsys.readouterr().err
    assert not (tmp_path / "uploads").exists()  # refused before the upload
    assert published(kafka_bootstrap, topic) == 0


@pytest.mark.parametrize("failure", ["unreachable", "no_bucket"])
def test_a_store_that_fails_publishes_nothing(
    failure: str,
    tmp_path: Path,
    kafka_bootstrap: str,
    s3_endpoint: str,
    topic: str,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing listens at the endpoint (retry later: exit 1), or the bucket is not there."""
    if failure == "unreachable":
        storage = s3_storage("anything", f"http://127.0.0.1:{free_port()}")
    else:
        storage = s3_storage(f"missing-{unique}", s3_endpoint)
    config = write_config(tmp_path / "service.yaml", topic, storage)
    video = video_file(tmp_path, "clip.mp4", 1024)
    argv = ["submit", str(video), "--upload", "--config", str(config)]
    assert cli_main([*argv, "--bootstrap", kafka_bootstrap]) == 1
    err = capsys.readouterr().err
    assert f"cannot upload to {storage['object_store_uri']}" in err
    assert ("EndpointConnectionError" if failure == "unreachable" else "NoSuchBucket") in err
    assert published(kafka_bootstrap, topic) == 0
