"""Chapters: where the topic of a video changes, from what is said and shown, on CPU.

A chapter may start only where a viewer would see or hear a break: at a shot cut, or in a pause
between two stretches of speech (``pause_s``). At each such place, the text said and shown
within ``window_s`` before it and after it is embedded with the service's text embedder (the
one search uses, so any language), and the two sides are compared (cosine similarity, on a
scale where the embedder's unrelated sentences are 0 and one text is 1). A place whose
likeness lies at least ``min_depth`` below the peaks of likeness beside it (``valley_depths``)
starts a chapter, the deepest first, no chapter shorter than ``min_chapter_s``. Each chapter gets a
title (the text on screen longest in it, else its first sentence) and a one-line summary (its
sentence nearest the chapter's meaning as a whole), and is a searchable segment of kind
``chapter``. It reads stored results only: added to finished videos, it decodes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from core.config import ChapterSettings, ServiceConfig
from core.outputs import OutputSegment, VideoOutput
from core.records import Vector, VideoResult
from core.shots import video_shots
from core.spans import text_spans
from core.stage_names import CHAPTERS
from models.base import TextEmbeddingModel
from models.embedding import text_embedder
from stages.base import VideoStage, WithEngine

#: Texts on screen shorter than this are not read for the topic (page numbers, logos).
_MIN_SHOWN_CHARS = 3
#: Sentences on nothing in common. How alike an embedder finds them is where its scale of
#: likeness starts (about 0.07 for the Universal Sentence Encoder, 0.77 for E5), so that
#: ``min_depth`` means the same with any embedder.
_UNRELATED = (
    "The train to the airport leaves every twenty minutes.",
    "Water boils at a lower temperature high in the mountains.",
    "She painted the kitchen walls a pale shade of yellow.",
    "The committee will vote on the budget next Tuesday.",
    "Penguins keep their eggs warm on their feet.",
    "My phone battery dies before the end of the day.",
    "The museum has a collection of ancient coins.",
    "He scored the winning goal in the last minute.",
)


@dataclass(frozen=True)
class Passage:
    """A text of the video and when it is there: a sentence said, or a text on screen."""

    start_s: float
    end_s: float
    text: str
    spoken: bool

    def overlap(self, start_s: float, end_s: float) -> float:
        return max(0.0, min(self.end_s, end_s) - max(self.start_s, start_s))


@dataclass(frozen=True)
class Chapter:
    start_s: float
    end_s: float
    title: str
    summary: str

    def to_json(self) -> dict[str, object]:
        return {
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "title": self.title,
            "summary": self.summary,
        }


@dataclass(frozen=True)
class Place:
    """Where a chapter may start (a cut or a pause), and how alike the text before and after
    it is (None: one side has no text)."""

    at_s: float
    similarity: float | None


class ChaptersStage(WithEngine[TextEmbeddingModel], VideoStage):
    """The video's chapters, from its transcript, its text on screen and its shots."""

    name = CHAPTERS
    reads = ("speech", "ocr_lines")
    segment_kinds = ("chapter",)
    searchable = ("chapter",)

    def __init__(self, settings: ChapterSettings, embed_model: str) -> None:
        self._settings = settings
        self._embed_model = embed_model
        self._unrelated = 0.0  # the embedder's likeness of unrelated sentences

    @classmethod
    def build(cls, config: ServiceConfig) -> ChaptersStage | None:
        settings = config.stages.chapters
        return cls(settings, config.stages.embed.model) if settings.enabled else None

    def version_params(self) -> Mapping[str, object]:
        return {
            "model": self.new_engine().model_id,
            **self._settings.model_dump(exclude={"enabled"}),
        }

    def new_engine(self) -> TextEmbeddingModel:
        return text_embedder(self._embed_model)

    def setup(self) -> None:
        super().setup()
        rows = self.engine.embed(list(_UNRELATED))
        alike = rows @ rows.T
        pairs = len(rows) * (len(rows) - 1)
        self._unrelated = float((alike.sum() - np.trace(alike)) / pairs)

    def analyse(self, result: VideoResult) -> VideoOutput:
        passages = passages_of(result)
        duration = max([result.probe.duration_s, *(p.end_s for p in passages), 0.0])
        if not passages:
            return VideoOutput({"chapters": []})
        vectors = self.engine.embed([p.text for p in passages])
        places = self.places(result, passages, duration, vectors)
        starts = self.starts(places, duration)
        bounds = list(zip([0.0, *starts], [*starts, duration], strict=True))
        chapters = [self.chapter(start, end, passages, vectors) for start, end in bounds]
        segments = tuple(
            OutputSegment(
                "chapter",
                chapter.start_s,
                chapter.end_s,
                f"{chapter.title}. {chapter.summary}",
                {"index": i, "title": chapter.title, "summary": chapter.summary},
            )
            for i, chapter in enumerate(chapters)
        )
        return VideoOutput({"chapters": [c.to_json() for c in chapters]}, segments)

    def places(
        self,
        result: VideoResult,
        passages: Sequence[Passage],
        duration_s: float,
        vectors: Vector,
    ) -> list[Place]:
        """Every cut and pause, in time order, with the likeness of the text around it."""
        cuts = [shot.start_s for shot in video_shots(result.frames, duration_s)[1:]]
        spoken = sorted((p for p in passages if p.spoken), key=lambda p: p.start_s)
        pauses = [
            (before.end_s + after.start_s) / 2
            for before, after in pairwise(spoken)
            if after.start_s - before.end_s >= self._settings.pause_s
            # a cut in the pause is the place already
            and not any(before.end_s <= cut <= after.start_s for cut in cuts)
        ]
        window = self._settings.window_s
        return [
            Place(
                at,
                self.likeness(
                    _side(passages, vectors, at - window, at),
                    _side(passages, vectors, at, at + window),
                ),
            )
            for at in sorted([*cuts, *pauses])
        ]

    def likeness(self, before: Vector | None, after: Vector | None) -> float | None:
        """The cosine similarity of two texts' meanings, on a scale where the embedder's
        unrelated sentences are 0 and the same text is 1 (None: one has no text)."""
        if before is None or after is None:
            return None
        scale = float(np.linalg.norm(before) * np.linalg.norm(after))
        if scale == 0:
            return None
        return (float(before @ after) / scale - self._unrelated) / (1 - self._unrelated)

    def starts(self, places: Sequence[Place], duration_s: float) -> list[float]:
        """Where chapters after the first start: the deepest valleys of likeness across
        places, each far enough from the others and from the ends."""
        settings = self._settings
        measured = [p for p in places if p.similarity is not None]
        depths = valley_depths([p.similarity or 0.0 for p in measured])
        shortest = settings.min_chapter_s
        taken: list[float] = []
        for depth, place in sorted(zip(depths, measured, strict=True), key=lambda d: -d[0]):
            if depth < settings.min_depth or len(taken) + 1 >= settings.max_chapters:
                break
            if not shortest <= place.at_s <= duration_s - shortest:
                continue
            if all(abs(place.at_s - t) >= shortest for t in taken):
                taken.append(place.at_s)
        return sorted(taken)

    def chapter(
        self, start_s: float, end_s: float, passages: Sequence[Passage], vectors: Vector
    ) -> Chapter:
        """One chapter: its span, a title and a one-line summary."""
        inside = [
            (i, p)
            for i, p in enumerate(passages)
            if p.overlap(start_s, end_s) > 0 and start_s <= (p.start_s + p.end_s) / 2 < end_s
        ]
        shown = [p for _, p in inside if not p.spoken]
        said = [(i, p) for i, p in inside if p.spoken]
        title = ""
        if shown:
            title = max(shown, key=lambda p: (p.overlap(start_s, end_s), -p.start_s)).text
        elif said:
            title = _words(said[0][1].text, self._settings.title_words)
        summary = ""
        if said:
            rows = vectors[[i for i, _ in said]]
            centre = rows.sum(axis=0)
            summary = said[int(np.argmax(rows @ centre))][1].text
        elif shown:
            summary = "; ".join(dict.fromkeys(p.text for p in shown))
        return Chapter(start_s, end_s, title.strip(), _words(summary, self._settings.summary_words))


def chapters_of(result: VideoResult) -> list[dict[str, Any]] | None:
    """The chapters in a result (``Chapter.to_json`` each); None where the stage did not run
    on it."""
    output = result.outputs.get(CHAPTERS)
    return None if output is None else list(output.data.get("chapters", []))


def valley_depths(likeness: Sequence[float]) -> list[float]:
    """How deep each point lies below the peaks beside it: for each, the highest value
    reached climbing (never down) to its left, and to its right, less its own, added (a
    depth score as TextTiling's). A point on a slope or a plateau has little depth; one
    between two alike stretches, much."""

    def peak(i: int, step: int) -> float:
        best = likeness[i]
        j = i + step
        while 0 <= j < len(likeness) and likeness[j] >= best:
            best = likeness[j]
            j += step
        return best

    return [peak(i, -1) + peak(i, 1) - 2 * value for i, value in enumerate(likeness)]


def passages_of(result: VideoResult) -> list[Passage]:
    """The sentences said and the texts shown in a video, in time order."""
    found: list[Passage] = []
    if result.speech is not None:
        found += [
            Passage(s.start_s, max(s.end_s, s.start_s), s.text.strip(), spoken=True)
            for s in result.speech.segments
            if s.text.strip()
        ]
    found += [
        Passage(span.start_s, max(span.end_s, span.start_s), span.text.strip(), spoken=False)
        for span in text_spans(result.frames)
        if len(span.text.strip()) >= _MIN_SHOWN_CHARS
    ]
    return sorted(found, key=lambda p: (p.start_s, p.end_s))


def _side(
    passages: Sequence[Passage], vectors: Vector, start_s: float, end_s: float
) -> Vector | None:
    """The meaning of the text there: its passages' vectors, each by the share of it there
    (a sentence said and a slide shown count alike, however long each lasts)."""
    weights = np.array(
        [p.overlap(start_s, end_s) / max(p.end_s - p.start_s, 1e-3) for p in passages],
        dtype=np.float32,
    )
    if not weights.any():
        return None
    total: Vector = weights @ vectors
    return total


def _words(text: str, limit: int) -> str:
    words = text.split()
    return " ".join(words[:limit]) + (" …" if len(words) > limit else "")
