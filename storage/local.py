"""``LocalObjectStore``: objects as files in a folder."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from core.errors import ReelsenseError
from storage.base import ObjectStore, check_key
from storage.errors import StoreRejected, StoreUnavailable

# A read-only or misconfigured root (a file where a folder belongs) stays broken on retry;
# a full disk or a flaky network mount may not.
_OS_REJECTED = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR)
_COPY_CHUNK = 1024 * 1024


def _map_os_error(exc: OSError, what: str) -> ReelsenseError:
    if isinstance(exc, PermissionError) or exc.errno in _OS_REJECTED:
        return StoreRejected(f"{what}: {exc}")
    return StoreUnavailable(f"{what}: {exc}")


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root``; written to a temp file, then renamed into place."""

    TEMP_PREFIX = ".tmp-"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        self._replace(key, lambda file: file.write(data))

    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> None:
        with path.open("rb") as source:  # the caller's file: its OSError is not the store's
            self._replace(key, lambda file: shutil.copyfileobj(source, file, _COPY_CHUNK))

    def _replace(self, key: str, write: Callable[[BinaryIO], object]) -> None:
        """``write`` fills a temp file beside the object, which then replaces it whole."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=self.TEMP_PREFIX, dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as file:
                    write(file)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise
        except OSError as exc:
            raise _map_os_error(exc, f"write {key}") from exc

    def uri(self, key: str) -> str:
        return self._path(key).resolve().as_uri()

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
        return sorted(
            path.relative_to(self.root).as_posix()
            for path in _files(self.root, prefix, self.TEMP_PREFIX)
        )

    def modified(self, prefix: str = "") -> dict[str, float]:
        found = {}
        for path in _files(self.root, prefix, self.TEMP_PREFIX):
            with contextlib.suppress(FileNotFoundError):  # removed since it was listed
                found[path.relative_to(self.root).as_posix()] = path.stat().st_mtime
        return found

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise _map_os_error(exc, f"delete {key}") from exc


def _files(root: Path, prefix: str, temp_prefix: str) -> list[Path]:
    """The files of keys starting with ``prefix``, temporary ones left out."""
    # Walk only the folder the prefix names, not the whole store.
    folder = root / prefix.rsplit("/", 1)[0] if "/" in prefix else root
    if ".." in prefix.split("/"):
        raise StoreRejected(f"invalid prefix {prefix!r}", code="sink_bad_key")
    paths: list[Path] = []
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            if name.startswith(temp_prefix):
                continue
            path = Path(dirpath, name)
            if path.relative_to(root).as_posix().startswith(prefix):
                paths.append(path)
    return paths
