"""What was said in a video: timed segments and words, per audio window and for the whole video.

Speech recognition works on windows of the audio track (``stages.audio``). Each window's
transcript is a ``SpeechPart``, persisted like a chunk of frames so that an interrupted video
resumes after the last window it finished; a ``SpeechEnd`` closes the track (how many windows
it had, or why it could not be read to the end). ``Speech`` is the video's whole transcript,
made from them, as the result document and the API carry it. Beside the words, each window
holds its ``AudioEvent``s: where music, singing or speech sound (``models.audio_events``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

SpeechStatus = Literal["done", "no_audio", "failed"]
AudioEventKind = Literal["music", "singing", "speech"]
AUDIO_EVENT_KINDS: tuple[AudioEventKind, ...] = ("music", "singing", "speech")
# The events that are segments of their own, their text their kind (a search for "music"
# finds them); speech is the transcript's.
SOUND_KINDS: tuple[AudioEventKind, ...] = ("music", "singing")
# Stretches of one kind closer than this are one event: a breath between sung lines, a rest
# between notes or a window's end do not split a song.
EVENT_GAP_S = 0.5


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

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SpokenWord:
        return cls(
            text=str(raw["text"]),
            start_s=float(raw["start_s"]),
            end_s=float(raw["end_s"]),
            probability=float(raw["probability"]),
        )


@dataclass(frozen=True)
class SpeechSegment:
    """A stretch of speech, in seconds on the video's timeline.

    ``avg_logprob`` (mean token log-probability, near 0 is confident) and ``no_speech_prob``
    are Whisper's own; ``words`` is empty unless word timestamps are on. ``language`` (ISO
    639-1) is the one it was decoded in, with the probability the model gave it (1.0 where a
    setting named it); None in what was stored before segments carried it.
    """

    start_s: float
    end_s: float
    text: str
    avg_logprob: float
    no_speech_prob: float
    words: tuple[SpokenWord, ...] = ()
    language: str | None = None
    language_probability: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "text": self.text,
            "language": self.language,
            "language_probability": self.language_probability,
            "avg_logprob": self.avg_logprob,
            "no_speech_prob": self.no_speech_prob,
            "words": [word.to_json() for word in self.words],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SpeechSegment:
        return cls(
            start_s=float(raw["start_s"]),
            end_s=float(raw["end_s"]),
            text=str(raw["text"]),
            avg_logprob=float(raw["avg_logprob"]),
            no_speech_prob=float(raw["no_speech_prob"]),
            words=tuple(SpokenWord.from_json(word) for word in raw.get("words") or ()),
            language=raw.get("language"),
            language_probability=_optional_float(raw.get("language_probability")),
        )


@dataclass(frozen=True)
class AudioEvent:
    """A stretch of the audio track that holds music, singing or speech, in seconds on the
    video's timeline. Kinds may overlap (a song is music and singing). ``confidence`` is the
    model's mean probability of the kind over the stretch, 0 to 1."""

    kind: AudioEventKind
    start_s: float
    end_s: float
    confidence: float

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "confidence": self.confidence,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> AudioEvent:
        kind = str(raw["kind"])
        if kind not in AUDIO_EVENT_KINDS:
            raise ValueError(f"unknown audio event kind {kind!r}")
        return cls(
            kind=kind,  # type: ignore[arg-type]  # checked above
            start_s=float(raw["start_s"]),
            end_s=float(raw["end_s"]),
            confidence=float(raw["confidence"]),
        )


def joined_events(
    events: Iterable[AudioEvent], gap_s: float = EVENT_GAP_S
) -> tuple[AudioEvent, ...]:
    """``events`` with those of one kind less than ``gap_s`` apart (or overlapping) joined,
    each joined confidence the mean of its parts' weighted by their lengths; in time order."""
    ordered = sorted(events, key=lambda e: e.start_s)
    joined: list[AudioEvent] = []
    for kind in AUDIO_EVENT_KINDS:
        run: list[AudioEvent] = []
        end_s = 0.0  # where the run so far ends
        for event in (e for e in ordered if e.kind == kind):
            if run and event.start_s - end_s >= gap_s:
                joined.append(_joined(run))
                run = []
            end_s = max(end_s, event.end_s) if run else event.end_s
            run.append(event)
        if run:
            joined.append(_joined(run))
    return tuple(sorted(joined, key=lambda e: (e.start_s, AUDIO_EVENT_KINDS.index(e.kind))))


def _joined(run: Sequence[AudioEvent]) -> AudioEvent:
    if len(run) == 1:
        return run[0]
    lengths = [max(e.end_s - e.start_s, 1e-9) for e in run]
    confidence = sum(e.confidence * n for e, n in zip(run, lengths, strict=True)) / sum(lengths)
    end_s = max(e.end_s for e in run)
    return AudioEvent(run[0].kind, run[0].start_s, end_s, round(confidence, 4))


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


@dataclass(frozen=True)
class SpeechPart:
    """The transcript of one window of a video's audio track (the ``index``-th, from 0) and
    its audio events (none in windows stored before events were detected, or with them off)."""

    video_id: str
    index: int
    start_s: float
    end_s: float
    language: str
    language_probability: float
    segments: tuple[SpeechSegment, ...]
    seconds: float = 0.0  # what recognising it took (wall time in the worker)
    events: tuple[AudioEvent, ...] = ()

    def labelled(self) -> tuple[SpeechSegment, ...]:
        """The segments, each with its language: the window's where it was stored without."""
        return tuple(
            segment
            if segment.language is not None
            else replace(
                segment,
                language=self.language,
                language_probability=self.language_probability,
            )
            for segment in self.segments
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "video_id": self.video_id,
            "index": self.index,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "language": self.language,
            "language_probability": self.language_probability,
            "segments": [segment.to_json() for segment in self.segments],
            "seconds": self.seconds,
            "events": [event.to_json() for event in self.events],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SpeechPart:
        return cls(
            video_id=str(raw["video_id"]),
            index=int(raw["index"]),
            start_s=float(raw["start_s"]),
            end_s=float(raw["end_s"]),
            language=str(raw["language"]),
            language_probability=float(raw["language_probability"]),
            segments=tuple(SpeechSegment.from_json(s) for s in raw["segments"]),
            seconds=float(raw.get("seconds") or 0.0),
            events=tuple(AudioEvent.from_json(e) for e in raw.get("events") or ()),
        )


@dataclass(frozen=True)
class SpeechEnd:
    """The end of a video's audio track: ``parts`` windows in all (0 without audio), or the
    reason the track could not be read past them (``error_code``, ``error_message``)."""

    video_id: str
    parts: int
    has_audio: bool = True
    error_code: str | None = None
    error_message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "video_id": self.video_id,
            "parts": self.parts,
            "has_audio": self.has_audio,
            "error_code": self.error_code,
            "error_message": self.error_message,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SpeechEnd:
        return cls(
            video_id=str(raw["video_id"]),
            parts=int(raw["parts"]),
            has_audio=bool(raw["has_audio"]),
            error_code=raw.get("error_code"),
            error_message=raw.get("error_message"),
        )


SpeechItem = SpeechPart | SpeechEnd


@dataclass(frozen=True)
class Speech:
    """A video's transcript. ``status``: ``done``; ``no_audio`` (the video has no audio
    track); ``failed`` (the track could not be read to its end: ``segments`` hold what came
    before, ``error_code`` and ``error_message`` say why). ``language`` is the one most of the
    speech was decoded with; ``audio_s`` the seconds of audio transcribed; ``events`` the
    audio events of its windows, those that meet at a window's end joined."""

    status: SpeechStatus
    segments: tuple[SpeechSegment, ...] = ()
    language: str | None = None
    audio_s: float = 0.0
    error_code: str | None = None
    error_message: str | None = None
    events: tuple[AudioEvent, ...] = ()

    @classmethod
    def assemble(cls, parts: Sequence[SpeechPart], end: SpeechEnd) -> Speech:
        """The video's speech from its windows' transcripts (in any order) and its end."""
        ordered = sorted(parts, key=lambda part: part.index)
        status: SpeechStatus = "done"
        if end.error_code is not None:
            status = "failed"
        elif not end.has_audio:
            status = "no_audio"
        segments = tuple(segment for part in ordered for segment in part.labelled())
        return cls(
            status=status,
            segments=segments,
            language=main_language(segments),
            audio_s=sum(part.end_s - part.start_s for part in ordered),
            error_code=end.error_code,
            error_message=end.error_message,
            events=joined_events(event for part in ordered for event in part.events),
        )

    @property
    def text(self) -> str:
        return " ".join(segment.text for segment in self.segments)

    def event_seconds(self) -> dict[AudioEventKind, float]:
        """How long each kind of audio event sounds, in seconds (0 for a kind not heard)."""
        return {
            kind: round(sum(e.end_s - e.start_s for e in self.events if e.kind == kind), 2)
            for kind in AUDIO_EVENT_KINDS
        }

    @property
    def error(self) -> dict[str, str] | None:
        """Why the track could not be read to its end, as the document and messages say it."""
        if self.error_code is None:
            return None
        return {"code": self.error_code, "message": self.error_message or ""}

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "language": self.language,
            "audio_s": self.audio_s,
            "segments": [segment.to_json() for segment in self.segments],
            "audio_events": [event.to_json() for event in self.events],
            "error": self.error,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Speech:
        error = raw.get("error") or {}
        status = str(raw["status"])
        if status not in ("done", "no_audio", "failed"):
            raise ValueError(f"unknown speech status {status!r}")
        return cls(
            status=status,  # type: ignore[arg-type]  # checked above
            segments=tuple(SpeechSegment.from_json(s) for s in raw.get("segments") or ()),
            language=raw.get("language"),
            audio_s=float(raw.get("audio_s") or 0.0),
            error_code=error.get("code"),
            error_message=error.get("message"),
            events=tuple(AudioEvent.from_json(e) for e in raw.get("audio_events") or ()),
        )


def heard(items: Iterable[SpeechItem]) -> Speech:
    """The speech of a whole track's items (its windows, then its end)."""
    parts: list[SpeechPart] = []
    for item in items:
        if isinstance(item, SpeechEnd):
            return Speech.assemble(parts, item)
        parts.append(item)
    raise ValueError("the speech items ended without a SpeechEnd")


def main_language(segments: Iterable[SpeechSegment]) -> str | None:
    """The language most of the segments' time was decoded in; None where none says."""
    spoken: dict[str, float] = defaultdict(float)
    for segment in segments:
        if segment.language is not None:
            spoken[segment.language] += segment.end_s - segment.start_s
    return max(spoken, key=spoken.__getitem__) if spoken else None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
