"""Model files identified by what they hold, so that new weights under an old path give the
stages that use them a new version (and finished videos are analysed again with them).

Reading every byte of a model of several GB at each start would take seconds to minutes, so
``content_id`` reads what tells two models apart at a small cost: each file's name, size and
first and last MiB, and the whole of every file up to 8 MiB (configurations, tokenizers,
vocabularies). Weights trained again differ in their first MiB (safetensors and GGUF put
their header and first tensors there) and their last; a file of another size is another
file. Folders are walked in name order; an id is computed once per file state (its size and
modification time) in a process.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

from models.errors import ModelLoadError

_SAMPLE = 1 << 20  # the first and last MiB of a large file
_WHOLE = 8 << 20  # files up to this size are read whole
_READ = 4 << 20  # a whole file's digest reads it in blocks of this size


def content_id(path: str | Path) -> str:
    """12 hex digits for the model file or folder at ``path``. Raises ``ModelLoadError``
    where it cannot be read."""
    root = Path(path)
    if not root.exists():
        raise ModelLoadError(f"no model at {root}")
    try:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        if not files:
            raise ModelLoadError(f"no model files at {root}")
        digest = hashlib.sha256()
        for file in files:
            stat = file.stat()
            name = file.name if file == root else file.relative_to(root).as_posix()
            digest.update(f"{name}\0{stat.st_size}\0".encode())
            digest.update(_file_digest(str(file), stat.st_size, stat.st_mtime_ns))
    except OSError as exc:
        raise ModelLoadError(f"cannot read the model at {root}: {exc}") from exc
    return digest.hexdigest()[:12]


@cache
def _file_digest(path: str, size: int, mtime_ns: int) -> bytes:
    """What is read of one file, digested (cached per file state)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        if size <= _WHOLE:
            digest.update(file.read())
        else:
            digest.update(file.read(_SAMPLE))
            file.seek(size - _SAMPLE, os.SEEK_SET)
            digest.update(file.read(_SAMPLE))
    return digest.digest()


def file_sha256(path: str | Path) -> str:
    """The sha256 of a whole file, as hex: read once per file state (its size and modification
    time) in a process. For weights whose digest is known or named in an id."""
    stat = Path(path).stat()
    return _whole_sha256(str(path), stat.st_size, stat.st_mtime_ns)


@cache
def _whole_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(_READ):
            digest.update(block)
    return digest.hexdigest()
