"""Speech recognition with faster-whisper (CTranslate2) on CPU, from weights on local disk only.

The default weights are Whisper base (99 languages), and ``tiny.en`` (English only, a third
of the CPU) is a setting; both ship in wheels (``models.whisper_files``). Any CTranslate2
conversion of a Whisper checkpoint in a local folder can replace them
(``AsrSettings.model_path``). Decoding is greedy at temperature 0 with no fallback to sampling,
so the same audio always gives the same text. faster-whisper's Silero VAD model ships inside
its wheel; with ``vad_filter`` only the stretches it finds speech in are decoded, which skips
silence cheaply and keeps Whisper from inventing text over music or noise.

Each segment carries the language it was decoded in. A multilingual model detects it in each
window; where it is unsure (two languages in one window make it so), the window is split at
its longest pause and each side decoded in its own: decoded in one language, the other's
speech comes out as a few wrong words or nothing at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.config import AsrSettings
from core.speech import SpeechSegment, SpokenWord, Transcript, main_language
from models.base import ModelEngine, cache_dir, package_version, require_audio
from models.errors import InferenceFailed, ModelLoadError
from models.fingerprint import content_id
from models.whisper_files import BundledWhisper, bundled_model, bundled_model_name, check_model_dir

SAMPLE_RATE = 16_000  # what every Whisper model takes
# CTranslate2 quantises the stored weights to int8 on load: its fastest compute type on CPU.
_COMPUTE_TYPE = "int8"
# Words that end a sentence end with one of these (Latin, CJK full-width, Devanagari).
_SENTENCE_ENDS = (".", "?", "!", "。", "？", "！", "।")
# Pauses: silences Silero VAD finds between stretches of speech at least this long.
_PAUSE_MS = 250
# A side of an unsure window shorter than this is not decoded on its own: too little speech
# to tell its language by.
_MIN_SIDE_S = 3.0
# Each side of an unsure window must be heard as its own language at least this surely for
# the window to be decoded side by side.
_SIDE_SURE = 0.7

Span = tuple[int, int]  # [start, end) in samples


class AsrEngine(ModelEngine):
    """Transcribes 16 kHz mono float32 audio with a Whisper model on CPU.

    ``cpu_threads`` sizes CTranslate2's pool to the CPUs the replica is granted (faster-whisper
    takes 4 otherwise); the VAD model always runs on one thread. ``model`` names the bundled
    Whisper used where ``model_path`` is None (base is joined into ``models_dir``).
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        model: BundledWhisper = "base",
        models_dir: str | Path | None = None,
        cpu_threads: int = 1,
        vad_filter: bool = True,
        word_timestamps: bool = True,
        mixed_below: float = 0.9,
    ) -> None:
        self.model_path = None if model_path is None else Path(model_path)
        self.model = model
        self.models_dir = cache_dir() if models_dir is None else Path(models_dir)
        self.cpu_threads = cpu_threads
        self.vad_filter = vad_filter
        self.word_timestamps = word_timestamps
        self.mixed_below = mixed_below
        self._model: Any = None
        self._model_id: str | None = None

    @classmethod
    def from_settings(cls, settings: AsrSettings) -> AsrEngine:
        return cls(
            settings.model_path,
            model=settings.model,
            models_dir=settings.models_dir,
            cpu_threads=settings.cpu_threads,
            vad_filter=settings.vad_filter,
            word_timestamps=settings.word_timestamps,
            mixed_below=settings.mixed_below,
        )

    def _path(self) -> Path:
        if self.model_path is None:
            return bundled_model(self.model, self.models_dir)
        check_model_dir(self.model_path)
        return self.model_path

    @property
    def model_id(self) -> str:
        # A folder is read once (a few MB of config and tokenizer); the pipeline version asks
        # for the id often. A bundled model's is known without reading it.
        if self._model_id is None:
            if self.model_path is None:
                name = bundled_model_name(self.model)
            else:
                check_model_dir(self.model_path)
                name = f"{self.model_path.name}-{content_id(self.model_path)}"
            self._model_id = (
                # CTranslate2's kernels make the numbers, so an upgrade may change the text.
                f"faster-whisper-{package_version('faster-whisper')}+ct2-{package_version('ctranslate2')}"
                f":{name}:{_COMPUTE_TYPE}"
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
            "mixed_below": self.mixed_below,
        }

    @property
    def multilingual(self) -> bool:
        return bool(self._loaded().model.is_multilingual)

    def _loaded(self) -> Any:
        if self._model is None:
            raise RuntimeError("AsrEngine.load() must run first")
        return self._model

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
            get_vad_model()  # cached by faster-whisper: its load is paid here, not later
        except ImportError as exc:
            raise ModelLoadError(f"faster-whisper/ctranslate2 not importable: {exc}") from exc
        except Exception as exc:
            raise ModelLoadError(f"cannot load the ASR model from {path}: {exc}") from exc
        self._model = model

    def speech_spans(self, samples: npt.NDArray[np.float32]) -> list[Span]:
        """Where Silero VAD hears speech in ``samples``, as sample spans; the gaps between
        them are pauses of at least 250 ms. About 2 CPU-ms per second of audio."""
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        options = VadOptions(min_silence_duration_ms=_PAUSE_MS, speech_pad_ms=30)
        found = get_speech_timestamps(require_audio(samples), options)
        return [(int(span["start"]), int(span["end"])) for span in found]

    def transcribe(
        self, samples: npt.NDArray[np.float32], offset_s: float = 0.0, language: str | None = None
    ) -> Transcript:
        """The speech in ``samples`` (16 kHz mono float32), its times shifted by ``offset_s``
        (where the samples start on the video's timeline). ``language`` (ISO 639-1, e.g.
        "en") skips detection; None detects it, and where the model is unsure of it
        (``mixed_below``) in each side of the longest pause on its own.

        Raises :class:`InvalidAudio` for samples of the wrong kind and ``InferenceFailed`` when
        the model fails on valid ones.
        """
        self._loaded()
        audio = require_audio(samples)
        whole = self._decoded(audio, offset_s, language)
        if language is not None or whole.language_probability >= self.mixed_below:
            return whole
        if not self.multilingual:
            return whole
        cut = _longest_pause(self.speech_spans(audio))
        if cut is None:
            return whole
        halves = ((audio[:cut], offset_s), (audio[cut:], offset_s + cut / SAMPLE_RATE))
        heard = [self._detected(half) for half, _ in halves]
        (first, first_p), (second, second_p) = heard
        # One language on both sides, or a side the model cannot name either (German it
        # half hears as Thai): the window stays as it was decoded whole.
        if first == second or min(first_p, second_p) < _SIDE_SURE:
            return whole
        sides = [
            self._decoded(half, at, side_language, side_p)
            for (half, at), (side_language, side_p) in zip(halves, heard, strict=True)
        ]
        segments = [*sides[0].segments, *sides[1].segments]
        return Transcript(
            language=main_language(segments) or whole.language,
            language_probability=max(first_p, second_p),
            segments=segments,
        )

    def _detected(self, audio: npt.NDArray[np.float32]) -> tuple[str, float]:
        """The language Whisper hears in the speech of ``audio`` (one encoder pass, no
        decoding), with its probability."""
        try:
            language, probability, _ = self._loaded().detect_language(audio, vad_filter=True)
        except Exception as exc:
            raise InferenceFailed(f"language detection failed: {exc}") from exc
        return str(language), float(probability)

    def _decoded(
        self,
        audio: npt.NDArray[np.float32],
        offset_s: float,
        language: str | None,
        detected_p: float | None = None,
    ) -> Transcript:
        """One call of the model on ``audio``, each segment marked with the language it was
        decoded in, and its probability (``detected_p`` where the language was detected
        before the call and named to it)."""
        try:
            segments, info = self._loaded().transcribe(
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
        heard = (str(info.language), detected_p or float(info.language_probability))
        return Transcript(
            language=heard[0],
            language_probability=heard[1],
            segments=[
                replace(part, language=heard[0], language_probability=heard[1])
                for s in decoded
                if str(s.text).strip()
                for part in _sentences(s, offset_s, end_s)
            ],
        )

    def close(self) -> None:
        self._model = None


def _longest_pause(spans: Sequence[Span]) -> int | None:
    """The middle of the longest pause between ``spans`` of speech that leaves at least
    ``_MIN_SIDE_S`` of speech on each side; None where there is none."""
    least = _MIN_SIDE_S * SAMPLE_RATE
    total = sum(end - start for start, end in spans)
    best: Span | None = None
    spoken = 0  # speech before the pause after each span
    for (a_start, a_end), (b_start, _) in pairwise(spans):
        spoken += a_end - a_start
        if spoken < least or total - spoken < least:
            continue
        if best is None or b_start - a_end > best[1] - best[0]:
            best = (a_end, b_start)
    return None if best is None else (best[0] + best[1]) // 2


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
