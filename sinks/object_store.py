"""The object store (a local folder or S3) and the result documents written into it.

Keys are relative, "/"-separated paths. A result document's key is derived from the video and
the pipeline version, and its bytes from the result alone (sorted keys, no write time), so
writing the same result twice leaves the same object.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import boto3
import botocore.exceptions
from botocore.config import Config

from core.config import StorageSettings
from core.errors import ReelsenseError
from core.records import Frame, ProbeInfo
from sinks.base import EarlierResult, Sink, VideoResult
from sinks.errors import SinkRejected, SinkUnavailable

DOCUMENT_SCHEMA = 1

# S3 error codes that retrying cannot fix; everything else (5xx, throttling) is retried.
_S3_REJECTED = {
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "NoSuchBucket",
    "InvalidBucketName",
    "InvalidObjectState",
    "EntityTooLarge",
    "KeyTooLongError",
    "403",
}
_S3_MISSING = {"NoSuchKey", "404", "NotFound"}


def check_key(key: str) -> str:
    """``key`` if it is a safe relative path; SinkRejected otherwise."""
    parts = key.split("/")
    if not key or key.startswith("/") or "\\" in key or any(p in ("", ".", "..") for p in parts):
        raise SinkRejected(f"invalid object key {key!r}", code="sink_bad_key")
    return key


class ObjectStore(ABC):
    """Bytes under keys. Writes replace whole objects atomically; a reader never sees half."""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> None: ...

    @abstractmethod
    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None if there is no such object."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys starting with ``prefix``, sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""


# A read-only or misconfigured root (a file where a folder belongs) stays broken on retry;
# a full disk or a flaky network mount may not.
_OS_REJECTED = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR)


def _map_os_error(exc: OSError, what: str) -> ReelsenseError:
    if isinstance(exc, PermissionError) or exc.errno in _OS_REJECTED:
        return SinkRejected(f"{what}: {exc}")
    return SinkUnavailable(f"{what}: {exc}")


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root``; written to a temp file, then renamed into place."""

    TEMP_PREFIX = ".tmp-"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=self.TEMP_PREFIX, dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise
        except OSError as exc:
            raise _map_os_error(exc, f"write {key}") from exc

    def get_bytes(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _map_os_error(exc, f"read {key}") from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        # Walk only the folder the prefix names, not the whole store.
        folder = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if ".." in prefix.split("/"):
            raise SinkRejected(f"invalid prefix {prefix!r}", code="sink_bad_key")
        keys: list[str] = []
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                if name.startswith(self.TEMP_PREFIX):
                    continue
                key = Path(dirpath, name).relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise _map_os_error(exc, f"delete {key}") from exc


def map_s3_error(exc: Exception, what: str) -> ReelsenseError:
    """botocore's exceptions as SinkUnavailable (retry) or SinkRejected (do not)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _S3_REJECTED:
            return SinkRejected(f"{what}: S3 {code}: {exc}")
        return SinkUnavailable(f"{what}: S3 {code}: {exc}")
    if isinstance(
        exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.ParamValidationError
    ):
        return SinkRejected(f"{what}: {exc}")
    # EndpointConnectionError, timeouts, closed connections, and anything unexpected.
    return SinkUnavailable(f"{what}: {type(exc).__name__}: {exc}")


class S3ObjectStore(ObjectStore):
    """Objects in ``bucket`` under ``prefix`` through a boto3 S3 client."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client if client is not None else boto3.client("s3")

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        extra = {"ContentType": content_type} if content_type else {}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **extra)
        except Exception as exc:
            raise map_s3_error(exc, f"put s3://{self.bucket}/{self._key(key)}") from exc

    def get_bytes(self, key: str) -> bytes | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            return bytes(response["Body"].read())
        except botocore.exceptions.ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _S3_MISSING:
                return None
            raise map_s3_error(exc, f"get s3://{self.bucket}/{self._key(key)}") from exc
        except Exception as exc:
            raise map_s3_error(exc, f"get s3://{self.bucket}/{self._key(key)}") from exc

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except botocore.exceptions.ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _S3_MISSING:
                return False
            raise map_s3_error(exc, f"head s3://{self.bucket}/{self._key(key)}") from exc
        except Exception as exc:
            raise map_s3_error(exc, f"head s3://{self.bucket}/{self._key(key)}") from exc

    def _pages(self, prefix: str) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        yield from paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix)

    def list(self, prefix: str = "") -> list[str]:
        try:
            keys = [
                item["Key"][len(self.prefix) :]
                for page in self._pages(prefix)
                for item in page.get("Contents", [])
            ]
        except Exception as exc:
            raise map_s3_error(exc, f"list s3://{self.bucket}/{self.prefix}{prefix}") from exc
        return sorted(keys)

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            raise map_s3_error(exc, f"delete s3://{self.bucket}/{self._key(key)}") from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def s3_client(storage: StorageSettings) -> Any:
    """A boto3 S3 client for the configured endpoint, region and keys (env/instance otherwise)."""
    config = Config(
        connect_timeout=storage.s3_connect_timeout_s,
        read_timeout=max(30.0, storage.s3_connect_timeout_s),
        retries={"max_attempts": storage.s3_max_attempts, "mode": "standard"},
        s3={"addressing_style": "path"} if storage.s3_endpoint_url else None,
    )
    keys: dict[str, str] = {}
    if storage.s3_access_key_id is not None:
        keys["aws_access_key_id"] = storage.s3_access_key_id.get_secret_value()
    if storage.s3_secret_access_key is not None:
        keys["aws_secret_access_key"] = storage.s3_secret_access_key.get_secret_value()
    return boto3.client(
        "s3",
        endpoint_url=storage.s3_endpoint_url,
        region_name=storage.s3_region,
        config=config,
        **keys,
    )


def lance_storage_options(storage: StorageSettings) -> dict[str, str] | None:
    """Object-store options for Lance on S3 (same endpoint and keys); None for a folder."""
    if not storage.lance_uri.startswith("s3://"):
        return None
    options = {
        "aws_region": storage.s3_region,
        "connect_timeout": f"{storage.s3_connect_timeout_s:g}s",
        "client_max_retries": str(max(0, storage.s3_max_attempts - 1)),
        "client_retry_timeout": str(max(1, round(storage.s3_connect_timeout_s * 2))),
    }
    if storage.s3_endpoint_url:
        options["aws_endpoint"] = storage.s3_endpoint_url
        if storage.s3_endpoint_url.startswith("http://"):
            options["allow_http"] = "true"
    if storage.s3_access_key_id is not None:
        options["aws_access_key_id"] = storage.s3_access_key_id.get_secret_value()
    if storage.s3_secret_access_key is not None:
        options["aws_secret_access_key"] = storage.s3_secret_access_key.get_secret_value()
    return options


def object_store_from_uri(uri: str, storage: StorageSettings) -> ObjectStore:
    """``s3://bucket/prefix`` -> S3ObjectStore; a folder (or ``file://`` folder) -> local."""
    if uri.startswith("s3://"):
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise SinkRejected(f"no bucket in {uri!r}", code="sink_bad_uri")
        return S3ObjectStore(bucket, prefix, s3_client(storage))
    return LocalObjectStore(uri.removeprefix("file://"))


def document_key(tenant: str, video_id: str, pipeline_version: str) -> str:
    """``results/{tenant}/{video_id}/{pipeline_version}.json``, each part percent-encoded."""
    parts = (quote(part, safe="") for part in (tenant, video_id, pipeline_version))
    tenant_part, video_part, version_part = parts
    return f"results/{tenant_part}/{video_part}/{version_part}.json"


def result_document(result: VideoResult) -> dict[str, Any]:
    """The JSON-ready document of one result: everything but pixels and embeddings."""
    ref = result.ref
    return {
        "schema": DOCUMENT_SCHEMA,
        "video": {
            "video_id": ref.video_id,
            "tenant": ref.tenant,
            "uri": ref.uri,
            "metadata": ref.metadata,
        },
        "pipeline_version": result.pipeline_version,
        "stage_versions": dict(result.stage_versions),
        "completed_at": result.completed_at.isoformat(),
        "probe": asdict(result.probe),
        "frames": [
            {
                **frame.to_json(),
                "ocr_text": frame.ocr_text,
                "has_embedding": frame.embedding is not None,
            }
            for frame in sorted(result.frames, key=lambda f: (f.timestamp_s, f.index))
        ],
        "text": result.text.split("\n") if result.text else [],
        "timings": {stage: float(seconds) for stage, seconds in result.timings.items()},
    }


def earlier_result(document: dict[str, Any], frame_count: int) -> EarlierResult:
    """A stored document read back as what a later run of the video may reuse."""
    return EarlierResult(
        pipeline_version=str(document["pipeline_version"]),
        frame_count=frame_count,
        uri=str(document["video"]["uri"]),
        probe=ProbeInfo(**document["probe"]),
        stage_versions=dict(document.get("stage_versions") or {}),
        frames=[Frame.from_json(raw) for raw in document["frames"]],
    )


def encode_document(document: dict[str, Any]) -> bytes:
    """Canonical bytes: sorted keys, no insignificant whitespace, UTF-8."""
    text = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return text.encode("utf-8")


class ResultDocumentSink(Sink):
    """One JSON document per video and pipeline version in the object store."""

    name = "result_documents"

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @classmethod
    def from_settings(cls, storage: StorageSettings) -> ResultDocumentSink:
        return cls(object_store_from_uri(storage.object_store_uri, storage))

    def write(self, results: Sequence[VideoResult]) -> None:
        latest = {result.ref.video_id: result for result in results}  # the last one wins
        for result in latest.values():
            key = document_key(result.ref.tenant, result.ref.video_id, result.pipeline_version)
            data = encode_document(result_document(result))
            self.store.put_bytes(key, data, content_type="application/json")

    def read(self, tenant: str, video_id: str, pipeline_version: str) -> dict[str, Any] | None:
        """The stored document, or None if that video was not written under that version."""
        data = self.store.get_bytes(document_key(tenant, video_id, pipeline_version))
        return None if data is None else dict(json.loads(data))

    def versions(self, tenant: str, video_id: str) -> list[str]:
        """Pipeline versions with a document for the video."""
        prefix = document_key(tenant, video_id, "x").rsplit("/", 1)[0] + "/"
        return [unquote(key[len(prefix) : -len(".json")]) for key in self.store.list(prefix)]

    def close(self) -> None:
        self.store.close()
