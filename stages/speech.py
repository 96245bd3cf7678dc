"""Speech: the audio track of a fetched video, window by window, into timed transcripts.

It runs where the video was fetched (the file is there), beside decoding. Each window of the
track (``AsrSettings.window_s``) becomes a ``SpeechPart``, and a ``SpeechEnd`` closes the
track. A run resumed after ``start`` windows skips their recognition (decoding audio costs
little next to it). Audio that cannot be read ends the track with the reason (``AudioError``,
``limit_duration``): the frames' work is not failed by it, and what came before is kept. The
models load on the first video that has an audio track, so silent videos cost nothing.

Each window's audio events (music, singing, speech: ``models.audio_events``) are found in the
same samples, whether or not anything is said in it (``AsrSettings.audio_events``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence

from core.config import AsrSettings, LimitSettings, ServiceConfig
from core.errors import PermanentError, ReelsenseError
from core.records import LocalVideo
from core.speech import SpeechEnd, SpeechItem, SpeechPart
from core.stage_names import SPEECH
from models.asr import AsrEngine
from models.audio_events import AudioEventDetector
from models.errors import InvalidAudio
from stages.audio import AUDIO_REVISION, AudioError, AudioWindow, audio_windows
from stages.base import Resources, Stage, StageKind
from stages.errors import LimitExceeded

# Audio the service records as unreadable instead of failing the video over.
_AUDIO_FAILURES = (AudioError, InvalidAudio, LimitExceeded)


class SpeechStage(Stage[LocalVideo, SpeechItem]):
    name = SPEECH
    kind = StageKind.AUDIO
    fills = ("speech",)
    resources = Resources(cpus=1.0, memory_mb=400)

    def __init__(self, settings: AsrSettings, limits: LimitSettings) -> None:
        self._settings = settings
        self._limits = limits
        self._engine = AsrEngine.from_settings(settings)
        self._events = AudioEventDetector() if settings.audio_events else None
        self._loaded = False
        self._load_lock = threading.Lock()

    @classmethod
    def build(cls, config: ServiceConfig) -> SpeechStage | None:
        return cls(config.asr, config.limits) if config.asr.enabled else None

    def version_params(self) -> Mapping[str, object]:
        return {
            **self._engine.version_params(),
            "language": self._settings.language,
            "tenant_languages": dict(sorted(self._settings.tenant_languages.items())),
            "window_s": self._settings.window_s,
            "audio_revision": AUDIO_REVISION,
            # Only when on: turned off, the version is the one before events were detected.
            **({"audio_events": self._events.version_params()} if self._events else {}),
        }

    def _engines_ready(self) -> tuple[AsrEngine, AudioEventDetector | None]:
        with self._load_lock:
            if not self._loaded:
                self._engine.load()
                if self._events is not None:
                    self._events.load()
                self._loaded = True
        return self._engine, self._events

    def stream(
        self, video: LocalVideo, start: int = 0, stop: threading.Event | None = None
    ) -> Iterator[SpeechItem]:
        """The video's windows from the ``start``-th on, then its end. Stops early, yielding
        no end, once ``stop`` is set (the caller has gone)."""
        video_id = video.ref.video_id
        if video.probe.audio_streams == 0:
            yield SpeechEnd(video_id, 0, has_audio=False)
            return
        index = 0
        try:
            for window in audio_windows(
                video.path,
                window_s=self._settings.window_s,
                limits=self._limits,
                speech=self._engine.speech_spans,
            ):
                if stop is not None and stop.is_set():
                    return
                if index >= start:
                    yield self._recognised(video_id, index, window, self._language(video))
                index += 1
        except _AUDIO_FAILURES as exc:
            yield _failed(video_id, index, exc)
            return
        except ReelsenseError as exc:  # the model's, not the audio's: the video's attempt fails
            exc.with_stage(SPEECH)
            raise
        yield SpeechEnd(video_id, index)

    def _language(self, video: LocalVideo) -> str | None:
        """The language a setting names for the video's speech (its tenant's first)."""
        return self._settings.tenant_languages.get(video.ref.tenant, self._settings.language)

    def _recognised(
        self, video_id: str, index: int, window: AudioWindow, language: str | None
    ) -> SpeechPart:
        engine, detector = self._engines_ready()
        started = time.monotonic()
        transcript = engine.transcribe(window.samples, window.start_s, language)
        events = () if detector is None else detector.detect(window.samples, window.start_s)
        return SpeechPart(
            video_id=video_id,
            index=index,
            start_s=window.start_s,
            end_s=window.end_s,
            language=transcript.language,
            language_probability=transcript.language_probability,
            segments=tuple(transcript.segments),
            seconds=time.monotonic() - started,
            events=events,
        )

    def process_batch(self, items: Sequence[LocalVideo]) -> list[SpeechItem]:
        return [item for video in items for item in self.stream(video)]

    def teardown(self) -> None:
        with self._load_lock:
            self._engine.close()
            if self._events is not None:
                self._events.close()
            self._loaded = False


def _failed(video_id: str, parts: int, error: PermanentError) -> SpeechEnd:
    return SpeechEnd(video_id, parts, error_code=error.code, error_message=str(error))
