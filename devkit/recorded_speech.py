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

from pathlib import Path

from devkit.pypi_files import PackagedFile

MANDARIN_TEXT = "欢迎大家来体验达摩院推出的语音识别模型"
# The same sentence in traditional characters: Whisper writes Mandarin in either script.
MANDARIN_TEXT_TRADITIONAL = "歡迎大家來體驗達摩院推出的語音識別模型"
CLIP = PackagedFile(
    package="funasr",
    version="1.3.9",
    packagetype="sdist",
    member="funasr-1.3.9/runtime/funasr_api/asr_example.wav",
    sha256="a1bd32dc78493c123f9625a66deee562aed2895f53fbc39f2cca3be7e6f4f20f",
    name="funasr-asr_example.wav",
)


def clip_path() -> Path:
    return CLIP.path


def mandarin_clip() -> Path | None:
    """The clip where it was fetched and is whole; None otherwise."""
    return CLIP.found()


def fetch() -> Path:
    """Fetch the source archive from PyPI (47 MB) and keep the clip."""
    return CLIP.fetch()


if __name__ == "__main__":
    print(fetch())
