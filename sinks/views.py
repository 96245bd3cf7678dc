"""The views of a result: its shots, its on-screen text spans and its segments, derived here
and nowhere else.

Several sinks read the same views of a video: the result document stores its shots and text
spans, the ``segments`` table its segments (shots, shot descriptions, text spans, speech, music
and singing), the search table its searchable segments under the shot at their middle, the
frame image table each frame's shot. ``views_of(result)`` derives all of them in one ``VideoViews``.

Within one write they are derived once. The writer (``sinks.writer``) opens ``shared_views()``
around each write; inside it, ``views_of`` returns the same views for the same result object to
every sink. Why a scope rather than the alternatives: passing views to ``Sink.write`` would
change the one interface of every sink for the few that read views, and a cache on the result
(or one that outlives the write) would make ``core`` depend on sinks or serve views of a result
changed since. The views are held only until the write is over; outside a scope (a sink
written directly, a test) each call derives them afresh.

A shot's view names the thumbnail of its keyframe, so the thumbnails' keys are made here too;
the result document sink stores the thumbnails under them.

Documents written before spans or shots were stored get them from their frames through
``stored_spans`` and ``stored_shots``: the API reads every document through these.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from core.records import Frame, VideoResult
from core.shots import video_shots
from core.spans import TextSpan, text_spans
from core.speech import SOUND_KINDS
from core.stage_names import DECODE

__all__ = [
    "Shot",
    "VideoViews",
    "decode_version",
    "derive_views",
    "shared_views",
    "shot_at",
    "stored_shots",
    "stored_spans",
    "thumbnail_key",
    "views_of",
]

Shot = tuple[float, float, str | None]  # start, end, thumbnail key


@dataclass(frozen=True)
class VideoViews:
    """What a result shows and says over time, as the sinks write it. Shared by every sink of
    a write: read it, never change it."""

    shots: tuple[dict[str, Any], ...]  # the result document's entries, in time order
    text_spans: tuple[TextSpan, ...]
    # ``kind, start_s, end_s, text, attributes``: the shots, their descriptions, the text
    # spans, the speech segments, the music and singing, then the video stages'
    # (``searchable`` set on those), each kind in time order.
    segments: tuple[dict[str, Any], ...]

    @property
    def shot_times(self) -> tuple[Shot, ...]:
        """Each shot's start, end and thumbnail key: what ``shot_at`` reads."""
        return tuple((s["start_s"], s["end_s"], s["thumbnail"]) for s in self.shots)


# The views of the write under way in this thread, by result object (the result is held with
# them, so its id is not reused while they are).
_shared: ContextVar[dict[int, tuple[VideoResult, VideoViews]] | None] = ContextVar(
    "shared_views", default=None
)


@contextmanager
def shared_views() -> Iterator[None]:
    """Within it, ``views_of`` derives each result's views once; a scope opened inside
    another shares the outer one's."""
    if _shared.get() is not None:
        yield
        return
    token = _shared.set({})
    try:
        yield
    finally:
        _shared.reset(token)


def views_of(result: VideoResult) -> VideoViews:
    """The views of ``result``: derived once per ``shared_views()`` scope, else each call."""
    held = _shared.get()
    if held is None:
        return derive_views(result)
    entry = held.get(id(result))
    if entry is None:
        entry = held[id(result)] = (result, derive_views(result))
    return entry[1]


def derive_views(result: VideoResult) -> VideoViews:
    """The views of ``result``, derived now (``views_of`` shares them within a write)."""
    shots = _shot_entries(result)
    spans = text_spans(result.frames)
    return VideoViews(tuple(shots), tuple(spans), tuple(_segments(result, shots, spans)))


def decode_version(result: VideoResult) -> str:
    """The version of the decode stage, which alone decides the pixels of the thumbnails."""
    return result.stage_versions.get(DECODE, result.pipeline_version)


def thumbnail_key(tenant: str, video_id: str, decode_version: str, sample: int) -> str:
    """``thumbnails/{tenant}/{video_id}/{decode_version}/{sample:06d}.jpg``: keyed by the
    decode stage's version, which alone decides the pixels, so a video re-run under a new
    pipeline version that keeps its decoding keeps its thumbnails."""
    parts = (quote(part, safe="") for part in (tenant, video_id, decode_version))
    tenant_part, video_part, version_part = parts
    return f"thumbnails/{tenant_part}/{video_part}/{version_part}/{sample:06d}.jpg"


def shot_at(time_s: float, shots: Sequence[Shot]) -> int | None:
    """The index of the shot at ``time_s`` (the last one past the end), if it has a thumbnail."""
    shot = next((i for i, (a, b, _) in enumerate(shots) if a <= time_s < b), None)
    if shot is None and shots and time_s >= shots[-1][1]:
        shot = len(shots) - 1
    return None if shot is None or shots[shot][2] is None else shot


def _shot_entries(result: VideoResult) -> list[dict[str, Any]]:
    """The shots (``core.shots``), each with the key of its keyframe's thumbnail (None without
    one) and the VLM's description of it (None without one)."""
    ref, version = result.ref, decode_version(result)
    thumbnails = {f.index for f in result.frames if f.thumbnail is not None}
    described = sorted(
        (f for f in result.frames if f.description is not None), key=lambda f: f.timestamp_s
    )
    shots = []
    for shot in video_shots(result.frames, result.probe.duration_s):
        key = None
        if shot.keyframe is not None and shot.keyframe in thumbnails:
            key = thumbnail_key(ref.tenant, ref.video_id, version, shot.keyframe)
        inside = [f for f in described if shot.start_s <= f.timestamp_s < shot.end_s]
        # The keyframe's description (it is the sample described), else the first in the shot.
        inside.sort(key=lambda f: f.index != shot.keyframe)
        description = inside[0].description if inside else None
        shots.append({**shot.to_json(), "thumbnail": key, "description": description})
    return shots


def _segments(
    result: VideoResult, shots: Sequence[dict[str, Any]], spans: Sequence[TextSpan]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for shot in shots:
        attributes = {k: shot[k] for k in ("entered_by", "transition_s", "keyframe", "thumbnail")}
        rows.append(_segment("shot", shot["start_s"], shot["end_s"], "", attributes))
    for shot in shots:
        if (description := shot["description"]) is not None:
            text = str(description.get("caption", ""))
            rows.append(_segment("description", shot["start_s"], shot["end_s"], text, description))
    for span in spans:
        box = [[float(x), float(y)] for x, y in span.box]
        attributes = {"box": box, "score": round(span.score, 4), "samples": span.frames}
        rows.append(_segment("text", span.start_s, span.end_s, span.text, attributes))
    speech = result.speech
    language = speech.language if speech is not None else None
    for segment in speech.segments if speech is not None else ():
        attributes = {
            "language": segment.language or language,
            "avg_logprob": round(segment.avg_logprob, 4),
            "no_speech_prob": round(segment.no_speech_prob, 4),
            "words": [word.to_json() for word in segment.words],
        }
        rows.append(_segment("speech", segment.start_s, segment.end_s, segment.text, attributes))
    for event in speech.events if speech is not None else ():
        if event.kind in SOUND_KINDS:
            attributes = {"confidence": event.confidence}
            rows.append(_segment(event.kind, event.start_s, event.end_s, event.kind, attributes))
    for output in result.outputs.values():  # the video stages', of kinds of their own
        for found in sorted(output.segments, key=lambda s: (s.start_s, s.end_s)):
            attributes = dict(found.attributes)
            row = _segment(found.kind, found.start_s, found.end_s, found.text, attributes)
            rows.append({**row, "searchable": found.searchable})
    return rows


def _segment(kind: str, start: float, end: float, text: str, attributes: Any) -> dict[str, Any]:
    return {"kind": kind, "start_s": start, "end_s": end, "text": text, "attributes": attributes}


# A document written before spans or shots were gets them derived now from its frames; the
# frames are read only then (they are most of a long video's document).
def stored_spans(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The text spans of a stored result document."""
    spans: list[dict[str, Any]] | None = document.get("text_spans")
    if spans is None:
        spans = [span.to_json() for span in text_spans(_stored_frames(document))]
    return spans


def stored_shots(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The shots of a stored result document (derived ones name no thumbnail or description:
    they were not stored)."""
    shots: list[dict[str, Any]] | None = document.get("shots")
    if shots is None:
        duration = float(document["probe"]["duration_s"])
        shots = [shot.to_json() for shot in video_shots(_stored_frames(document), duration)]
    return shots


def _stored_frames(document: Mapping[str, Any]) -> list[Frame]:
    return [Frame.from_json(raw) for raw in document["frames"]]
