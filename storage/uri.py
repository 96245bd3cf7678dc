"""The object store a URI names."""

from __future__ import annotations

from core.config import StorageSettings
from storage.base import ObjectStore
from storage.errors import StoreRejected
from storage.local import LocalObjectStore
from storage.s3 import S3ObjectStore, s3_client


def object_store_from_uri(uri: str, storage: StorageSettings) -> ObjectStore:
    """``s3://bucket/prefix`` -> S3ObjectStore; a folder (or ``file://`` folder) -> local."""
    if uri.startswith("s3://"):
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise StoreRejected(f"no bucket in {uri!r}", code="sink_bad_uri")
        return S3ObjectStore(bucket, prefix, s3_client(storage))
    return LocalObjectStore(uri.removeprefix("file://"))
