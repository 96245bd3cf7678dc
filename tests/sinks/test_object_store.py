"""Object stores (local folder, S3 on a real moto server) and the result documents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from pydantic import SecretStr

from core.config import StorageSettings
from devkit.services import free_port
from sinks.errors import SinkRejected, SinkUnavailable
from sinks.images import LanceImageIndex
from sinks.lance import LanceFrameSink, LanceSummarySink
from sinks.object_store import ResultDocumentSink, document_key, earlier_result
from storage.base import ObjectStore
from storage.errors import StoreRejected, StoreUnavailable
from storage.local import LocalObjectStore
from storage.s3 import S3ObjectStore, s3_client
from storage.uri import object_store_from_uri
from tests.sinks import make_result, with_image_vectors


def s3_settings(endpoint: str, **extra: Any) -> StorageSettings:
    return StorageSettings(
        s3_endpoint_url=endpoint,
        s3_access_key_id=SecretStr("testing"),
        s3_secret_access_key=SecretStr("testing"),
        s3_connect_timeout_s=1.0,
        s3_max_attempts=1,
        **extra,
    )


@pytest.fixture
def bucket(s3_endpoint: str, unique: str) -> str:
    name = f"sinks-{unique}"
    s3_client(s3_settings(s3_endpoint)).create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, s3_endpoint: str, unique: str
) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield LocalObjectStore(tmp_path / "objects")
        return
    settings = s3_settings(s3_endpoint)
    name = f"store-{unique}"
    s3_client(settings).create_bucket(Bucket=name)
    made = object_store_from_uri(f"s3://{name}/some/prefix", settings)
    assert isinstance(made, S3ObjectStore)
    yield made
    made.close()


def test_put_get_exists_list_delete(store: ObjectStore) -> None:
    assert store.get_bytes("a/b.json") is None
    assert not store.exists("a/b.json")
    store.put_bytes("a/b.json", b"one")
    store.put_bytes("a/b.json", b"two")
    store.put_bytes("a/c/d.json", b"three")
    store.put_bytes("ab.json", b"four")
    assert store.get_bytes("a/b.json") == b"two"
    assert store.exists("a/c/d.json")
    assert store.list("a/") == ["a/b.json", "a/c/d.json"]
    assert store.list("a") == ["a/b.json", "a/c/d.json", "ab.json"]
    assert store.list() == ["a/b.json", "a/c/d.json", "ab.json"]
    store.delete("a/b.json")
    store.delete("a/b.json")  # already gone: fine
    assert store.list("a/") == ["a/c/d.json"]


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "a\\b", "./a"])
def test_unsafe_keys_are_rejected(store: ObjectStore, key: str) -> None:
    with pytest.raises(StoreRejected):
        store.put_bytes(key, b"x")


def test_local_writes_leave_no_temp_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    for i in range(5):
        store.put_bytes("x/y.json", str(i).encode())
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["y.json"]
    assert store.get_bytes("x/y.json") == b"4"


def test_local_store_rooted_at_a_file_is_rejected(tmp_path: Path) -> None:
    root = tmp_path / "not-a-folder"
    root.write_bytes(b"")
    store = LocalObjectStore(root)
    with pytest.raises(StoreRejected):
        store.put_bytes("a/b.json", b"x")


def test_result_document_is_deterministic_and_readable(store: ObjectStore) -> None:
    sink = ResultDocumentSink(store)
    result = make_result("vid-1", frames=3, tenant="acme")
    sink.write([result, make_result("vid-2", frames=2, tenant="acme")])
    key = document_key("acme", "vid-1", "v1")
    assert key == "results/acme/vid-1/v1.json"
    first = store.get_bytes(key)
    sink.write([result])
    assert store.get_bytes(key) == first
    assert first is not None

    doc = json.loads(first)
    assert list(doc) == sorted(doc)
    assert doc["video"]["video_id"] == "vid-1"
    assert doc["probe"]["codec"] == "h264"
    assert [f["timestamp_s"] for f in doc["frames"]] == [0.0, 0.5, 1.0]
    assert doc["frames"][0]["ocr_lines"][0]["box"][1] == [10.0, 0.0]
    assert doc["text"] == ["vid-1 says 0", "vid-1 says 1", "vid-1 says 2"]
    assert doc["timings"] == {"decode": 0.5, "ocr": 1.25}
    assert all("embedding" not in frame for frame in doc["frames"])
    assert doc["frames"][0]["has_embedding"] is True
    assert sink.read("acme", "vid-1", "v1") == doc
    assert sink.read("acme", "vid-1", "v9") is None
    # Read back as an earlier result: every frame's findings as written, no pixels.
    earlier = earlier_result(doc, frame_count=3)
    assert earlier.probe == result.probe
    found = [(f.index, f.timestamp_s, f.keyframe, f.ocr_lines, f.caption) for f in earlier.frames]
    assert found == [
        (f.index, f.timestamp_s, f.keyframe, f.ocr_lines, f.caption) for f in result.frames
    ]
    assert all(f.image is None and f.embedding is None for f in earlier.frames)

    sink.write([make_result("vid-1", frames=1, tenant="acme", version="v/2")])
    assert store.exists("results/acme/vid-1/v%2F2.json")
    assert sink.versions("acme", "vid-1") == ["v/2", "v1"]
    assert store.list("results/acme/vid-2/") == ["results/acme/vid-2/v1.json"]


def test_s3_endpoint_down_is_unavailable() -> None:
    settings = s3_settings(f"http://127.0.0.1:{free_port()}")
    store = object_store_from_uri("s3://nowhere/prefix", settings)
    with pytest.raises(StoreUnavailable):
        store.put_bytes("a.json", b"x")
    with pytest.raises(StoreUnavailable):
        store.get_bytes("a.json")
    with pytest.raises(StoreUnavailable):
        store.list()
    with pytest.raises(StoreUnavailable):
        ResultDocumentSink(store).write([make_result("a", frames=1)])


def test_s3_missing_bucket_is_rejected(s3_endpoint: str, unique: str) -> None:
    store = object_store_from_uri(f"s3://missing-{unique}", s3_settings(s3_endpoint))
    with pytest.raises(StoreRejected):
        store.put_bytes("a.json", b"x")


def test_lance_tables_on_s3(s3_endpoint: str, bucket: str) -> None:
    settings = s3_settings(s3_endpoint, lance_uri=f"s3://{bucket}/lance")
    frames = LanceFrameSink.from_settings(settings)
    images = LanceImageIndex.from_settings(settings, "random-images")
    videos = LanceSummarySink.from_settings(settings)
    batch = [with_image_vectors(make_result(f"v{i}", frames=5, seed=i)) for i in range(3)]
    for sink in (frames, images, videos):
        sink.write(batch)
        sink.write(batch)
    frames.write([make_result("v0", frames=2, version="v2")])

    assert frames.count_rows() == 12
    assert {r["pipeline_version"] for r in frames.frame_rows("v0")} == {"v2"}
    assert videos.count_rows() == 3
    query = batch[1].frames[3].embedding
    assert query is not None
    assert images.nearest(query, 1, None)[0]["video_id"] == "v1"
    listed = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).list_objects_v2(Bucket=bucket, Prefix="lance/frames.lance/_versions/")
    assert listed["KeyCount"] >= 3


def test_lance_on_s3_endpoint_down_is_unavailable() -> None:
    settings = s3_settings(f"http://127.0.0.1:{free_port()}", lance_uri="s3://nowhere/lance")
    with pytest.raises(SinkUnavailable):
        LanceFrameSink.from_settings(settings).write([make_result("a", frames=1)])


def test_lance_on_s3_missing_bucket_is_rejected(s3_endpoint: str, unique: str) -> None:
    settings = s3_settings(s3_endpoint, lance_uri=f"s3://missing-{unique}/lance")
    with pytest.raises(SinkRejected):
        LanceSummarySink.from_settings(settings).write([make_result("a", frames=1)])
