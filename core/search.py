"""What a search asks for and what it finds: shared by the search index, the API and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.speech import SOUND_KINDS

Method = Literal["hybrid", "vector", "text"]
METHODS: tuple[Method, ...] = ("hybrid", "vector", "text")
# frame: a sample found by its pixels (with an image embedding model configured); music and
# singing: audio events.
SEARCHED_KINDS = ("text", "speech", "description", "frame", *SOUND_KINDS)
# A chapter or a summary covers a stretch of a video, not a moment in it: it is a hit of its
# own, never merged with the moments it spans (which would make the whole stretch one place).
STRETCH_KINDS = frozenset({"chapter", "summary"})


@dataclass(frozen=True)
class SearchFilter:
    """What a search is limited to; ``start_s``/``end_s``: segments overlapping that range."""

    tenant: str | None = None
    video_id: str | None = None
    kinds: tuple[str, ...] = ()
    start_s: float | None = None
    end_s: float | None = None


@dataclass(frozen=True)
class SegmentHit:
    """One place in one video that matches: the span of the merged segments, their texts
    (the best match's first, `` · `` between them), the kinds that matched, and a score
    (higher is better: the fused reciprocal rank for ``hybrid``, the cosine similarity for
    ``vector``, BM25 for ``text``); ``shot``: the shot whose thumbnail shows it; ``partial``:
    found before its video was done."""

    video_id: str
    tenant: str
    start_s: float
    end_s: float
    text: str
    kinds: tuple[str, ...]
    score: float
    shot: int | None = None
    partial: bool = False
