"""The result of a done video as the API answers it (``GET /v1/videos/{id}/result``): the
stored result document (``sinks/object_store.py``) in the fields a client can rely on."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.models import ErrorDetail
from core.description import ShotDescription


class ResultVideo(BaseModel):
    video_id: str
    tenant: str
    uri: str = Field(description="The source URI, its userinfo and query hidden (`***`).")


class ProbeFacts(BaseModel):
    """What the container says about the video."""

    duration_s: float
    width: int
    height: int
    fps: float


class ScreenText(BaseModel):
    """One text on screen over consecutive samples: the OCR lines of those samples merged,
    misreadings and flicker forgiven (see README, "What a video shows, and when")."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(description="The most frequent reading.")
    box: list[tuple[float, float]] = Field(
        description="Corners in pixels (top-left, top-right, bottom-right, bottom-left): the "
        "median bounds of the readings."
    )
    start_s: float = Field(description="The first sample it was read in.")
    end_s: float = Field(
        description="The sample after the last one it was read in (or one sample interval "
        "after the video's last sample)."
    )
    score: float = Field(description="The mean OCR score of its readings.")
    frames: int = Field(description="How many samples it was read in.")


class ShotInfo(BaseModel):
    """One shot: from the boundary that starts it to the next (see README, "What a video
    shows, and when")."""

    model_config = ConfigDict(frozen=True)

    index: int
    start_s: float
    end_s: float
    entered_by: Literal["start", "cut", "gradual"] = Field(
        description="How the shot begins: the video's start, a hard cut, or a gradual "
        "transition (dissolve, fade) whose middle is `start_s`."
    )
    transition_s: tuple[float, float] | None = Field(
        description="From when to when a gradual transition into the shot blends."
    )
    keyframe: int | None = Field(
        description="The index of the sample that shows the shot: the first taken in it after "
        "its transition; null when no sample fell in it."
    )
    keyframe_s: float | None
    samples: int = Field(description="How many samples were taken in the shot.")
    thumbnail_url: str | None = Field(
        default=None, description="Where the keyframe's JPEG is served; null without one."
    )
    description: ShotDescription | None = Field(
        default=None,
        description="What the VLM says the keyframe shows, in a fixed JSON schema (constrained "
        "decoding: it always parses); null when no VLM runs or its answer did not complete.",
    )


class TextLine(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    score: float
    box: list[tuple[float, float]] = Field(description="Polygon corners in pixels.")


class FrameText(BaseModel):
    """One sampled frame and the OCR lines read in it."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(description="Position among the video's samples, 0-based.")
    timestamp_s: float
    ocr_lines: list[TextLine]
    extras: dict[str, Any] = Field(
        default_factory=dict,
        description="What stages from other packages found in the sample, by output name "
        "(each stage's `fills`).",
    )


class TimedWord(BaseModel):
    """One word of a speech segment, as the speech model timed it."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(description="The word as decoded, with its leading space if it has one.")
    start_s: float
    end_s: float
    probability: float = Field(description="The model's confidence in the word, 0 to 1.")


class SpokenText(BaseModel):
    """One segment of the transcript: a stretch of speech, in seconds on the video's
    timeline."""

    model_config = ConfigDict(frozen=True)

    start_s: float
    end_s: float
    text: str
    language: str | None = Field(
        default=None,
        description="The language the segment was decoded in (ISO 639-1 where there is one, "
        "e.g. `zh`): detected in its window, or in its side of the window's longest pause "
        "where the window holds two; null in results stored before segments carried it.",
    )
    language_probability: float | None = Field(
        default=None,
        description="The model's probability of that language, 0 to 1 (1 where a setting "
        "named it).",
    )
    avg_logprob: float = Field(
        description="Mean log-probability of the segment's tokens: near 0 is confident, "
        "below about -1 often a misheard stretch."
    )
    no_speech_prob: float = Field(
        description="The model's probability that the stretch holds no speech at all, 0 to 1."
    )
    words: list[TimedWord] | None = Field(
        default=None,
        description="Each word with its times; only with `?words=true`. Empty when the "
        "pipeline recognised speech without word timestamps.",
    )


class AudioEventInfo(BaseModel):
    """A stretch of the audio track that holds music, singing or speech, in seconds on the
    video's timeline; kinds may overlap (a song is music and singing)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["music", "singing", "speech"]
    start_s: float
    end_s: float
    confidence: float = Field(
        description="The audio event model's mean probability of the kind over the stretch, 0 to 1."
    )


class VideoSpeech(BaseModel):
    """What was said in the video: its audio track's speech as timed segments."""

    model_config = ConfigDict(frozen=True)

    status: Literal["done", "no_audio", "failed"] = Field(
        description="`done`; `no_audio` (the video has no audio track); `failed` (the track "
        "could not be read to its end: `segments` hold what came before, `error` says why)."
    )
    language: str | None = Field(
        description="The language most of the speech was decoded in, as the model names it "
        "(ISO 639-1 where there is one, e.g. `en`); null when nothing was said."
    )
    audio_s: float = Field(description="Seconds of audio transcribed.")
    segments: list[SpokenText]
    audio_events: list[AudioEventInfo] = Field(
        default_factory=list,
        description="Where music, singing and speech sound, in time order, whether or not "
        "words were recognised. Empty when audio events are off (`asr.audio_events`) or in "
        "results stored before them.",
    )
    error: ErrorDetail | None = Field(
        default=None, description="Why recognition stopped, when `status` is `failed`."
    )


class OutputSegmentInfo(BaseModel):
    """One stretch of the video a video stage says something about (e.g. a chapter)."""

    model_config = ConfigDict(frozen=True)

    kind: str = Field(description="The segment kind, one the stage declares.")
    start_s: float
    end_s: float
    text: str
    attributes: dict[str, Any]
    searchable: bool = Field(description="Whether `/v1/search` finds it (its `kind`).")


class StageOutput(BaseModel):
    """What one video stage gave for the video."""

    model_config = ConfigDict(frozen=True)

    data: dict[str, Any] = Field(description="The stage's own findings, as it shapes them.")
    segments: list[OutputSegmentInfo]


class VideoResultDocument(BaseModel):
    """What the pipeline found in one done video."""

    video: ResultVideo
    pipeline_version: str
    stage_versions: dict[str, str]
    completed_at: datetime
    probe: ProbeFacts
    text_spans: list[ScreenText]
    shots: list[ShotInfo]
    frames: list[FrameText] | None = Field(
        default=None, description="Each sample's OCR lines; only with `?frames=true`."
    )
    speech: VideoSpeech | None = Field(
        default=None,
        description="The transcript; null when speech recognition was off for the video "
        "(or the video was processed before it existed).",
    )
    outputs: dict[str, StageOutput] = Field(
        default_factory=dict,
        description="What each video stage (run once per video on its result) gave, by stage.",
    )
