"""``S3ObjectStore`` through boto3, its client from settings, and Lance's options for S3."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import boto3
import botocore.exceptions
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from core.config import StorageSettings
from core.errors import ReelsenseError
from storage.base import ObjectStore, check_key
from storage.errors import StoreAccessDenied, StoreRejected, StoreUnavailable

# S3 error codes that retrying cannot fix; everything else (5xx, throttling) is retried.
_S3_REJECTED = {
    "NoSuchBucket",
    "InvalidBucketName",
    "InvalidObjectState",
    "EntityTooLarge",
    "KeyTooLongError",
}
# The service's credentials refused: retried as an outage (keys rotate, policies propagate).
_S3_ACCESS = {
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "403",
}
T = TypeVar("T")
_S3_MISSING = {"NoSuchKey", "404", "NotFound"}
# Uploads in parts (10,000 at most: files up to about 160 GB), four in flight: 64 MiB held.
_PART_BYTES = 16 * 1024 * 1024
_TRANSFER = TransferConfig(
    multipart_threshold=_PART_BYTES, multipart_chunksize=_PART_BYTES, max_concurrency=4
)


def _error_code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def map_s3_error(exc: Exception, what: str) -> ReelsenseError:
    """botocore's exceptions as StoreUnavailable (retry) or StoreRejected (do not)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = _error_code(exc)
        if code in _S3_REJECTED:
            return StoreRejected(f"{what}: S3 {code}: {exc}")
        if code in _S3_ACCESS:
            return StoreAccessDenied(f"{what}: S3 {code}: {exc}", retry_after=5.0)
        return StoreUnavailable(f"{what}: S3 {code}: {exc}")
    if isinstance(exc, botocore.exceptions.NoCredentialsError):  # a metadata endpoint away
        return StoreAccessDenied(f"{what}: {exc}", retry_after=5.0)
    if isinstance(exc, botocore.exceptions.ParamValidationError):
        return StoreRejected(f"{what}: {exc}")
    # EndpointConnectionError, timeouts, closed connections, and anything unexpected.
    return StoreUnavailable(f"{what}: {type(exc).__name__}: {exc}")


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

    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> None:
        extra = {"ContentType": content_type} if content_type else {}
        with path.open("rb") as source:  # the caller's file: its OSError is not the store's
            try:
                # boto3's managed transfer: parts are read as they are sent, so neither memory
                # nor the 5 GB limit of one PUT caps the file.
                self.client.upload_fileobj(
                    source, self.bucket, self._key(key), ExtraArgs=extra, Config=_TRANSFER
                )
            except Exception as exc:
                # A failed part or multipart call comes wrapped; S3's reason is its cause.
                cause = exc.__context__ if isinstance(exc, S3UploadFailedError) else exc
                raise map_s3_error(
                    cause if isinstance(cause, Exception) else exc,
                    f"upload s3://{self.bucket}/{self._key(key)}",
                ) from exc

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def get_bytes(self, key: str) -> bytes | None:
        def read(s3_key: str) -> bytes:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=s3_key)["Body"].read())

        return self._unless_missing("get", key, read)

    def exists(self, key: str) -> bool:
        def head(s3_key: str) -> bool:
            self.client.head_object(Bucket=self.bucket, Key=s3_key)
            return True

        return self._unless_missing("head", key, head) or False

    def _unless_missing(self, verb: str, key: str, call: Callable[[str], T]) -> T | None:
        """``call(s3_key)``; None when there is no such object, any other failure mapped."""
        s3_key = self._key(key)
        try:
            return call(s3_key)
        except Exception as exc:
            if isinstance(exc, botocore.exceptions.ClientError) and _error_code(exc) in _S3_MISSING:
                return None
            raise map_s3_error(exc, f"{verb} s3://{self.bucket}/{s3_key}") from exc

    def _pages(self, prefix: str) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        yield from paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix)

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self.modified(prefix))

    def modified(self, prefix: str = "") -> dict[str, float]:
        try:
            return {
                item["Key"][len(self.prefix) :]: item["LastModified"].timestamp()
                for page in self._pages(prefix)
                for item in page.get("Contents", [])
            }
        except Exception as exc:
            raise map_s3_error(exc, f"list s3://{self.bucket}/{self.prefix}{prefix}") from exc

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
