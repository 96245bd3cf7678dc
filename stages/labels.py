"""What is in the picture, on CPU: ImageNet classes per sample, then labels per shot.

- ``labels`` (frames): the classifier's most likely classes for each sample
  (``models.labels``), stored with the sample as ``[{"class", "name", "score"}]``.
- ``shot_labels`` (video): each shot's labels, from its samples' classes: a class whose mean
  probability over the shot reaches ``min_score``, and a broader kind ("dog", "bird", "hoofed
  animal", "vehicle") whose classes together reach it, so that a shot of a German shepherd is
  found as "dog" even where the classifier hesitates between breeds. Each shot with labels is a
  segment of kind ``label``, which search finds in any language through the text embedder
  ("狗" finds "dog"). It reads stored samples only: added to finished videos, it decodes nothing.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from core.config import LabelSettings, ServiceConfig
from core.outputs import OutputSegment, VideoOutput
from core.records import Chunk, Frame, VideoResult
from core.shots import ShotSegment, video_shots
from core.stage_names import LABELS, SHOT_LABELS
from models.labels import ImageClassifier, imagenet_classes
from stages.base import PIXELS, EngineStage, Fusion, Resources, VideoStage

#: Classes below this probability are not stored with a sample: they never add up to a label.
_DUST = 0.01


class LabelsStage(EngineStage[ImageClassifier]):
    """Fills ``labels`` for every sample that still has its pixels."""

    name = LABELS
    reads = (PIXELS,)
    fills = ("labels",)
    # Measured: 14 CPU ms a 720p sample on one thread, scaling included (bench.perf.labels_cost).
    resources = Resources(cpus=0.2)
    fusion = Fusion.PER_CORE

    def __init__(self, settings: LabelSettings) -> None:
        self._settings = settings

    @classmethod
    def build(cls, config: ServiceConfig) -> LabelsStage | None:
        return cls(config.stages.labels) if config.stages.labels.enabled else None

    def new_engine(self) -> ImageClassifier:
        cache_dir = self._settings.cache_dir
        return ImageClassifier(
            cache_dir=Path(cache_dir) if cache_dir else None, threads=self._settings.threads
        )

    def version_params(self) -> Mapping[str, object]:
        return {"model": self.new_engine().model_id, "top_k": self._settings.top_k}

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        frames = [f for chunk in items for f in chunk.frames if f.image is not None]
        images = [f.image for f in frames if f.image is not None]
        classes = imagenet_classes()
        for frame, row in zip(frames, self.engine.probabilities(images), strict=True):
            best = row.argsort()[::-1][: self._settings.top_k]
            frame.extras[LABELS] = [
                {"class": int(i), "name": classes[i].name, "score": round(float(row[i]), 4)}
                for i in best
                if row[i] >= _DUST
            ]
        return list(items)


class ShotLabelsStage(VideoStage):
    """Each shot's labels, from its samples' stored ``labels``; the video's, weighted by the
    length of the shots that show them, in its section of the result."""

    name = SHOT_LABELS
    reads = (LABELS,)
    segment_kinds = ("label",)
    searchable = ("label",)

    def __init__(self, settings: LabelSettings) -> None:
        self._settings = settings

    @classmethod
    def build(cls, config: ServiceConfig) -> ShotLabelsStage | None:
        return cls(config.stages.labels) if config.stages.labels.enabled else None

    def version_params(self) -> Mapping[str, object]:
        names = "\n".join(f"{c.name}\t{','.join(c.kinds)}" for c in imagenet_classes())
        return {
            "min_score": self._settings.min_score,
            "max_labels": self._settings.max_labels,
            "taxonomy": hashlib.sha256(names.encode()).hexdigest()[:12],
        }

    def analyse(self, result: VideoResult) -> VideoOutput:
        segments: list[OutputSegment] = []
        video: dict[str, float] = defaultdict(float)
        shots = _samples_by_shot(result.frames, result.probe.duration_s)
        duration = max([result.probe.duration_s, *(shot.end_s for shot, _ in shots), 1e-9])
        for shot, samples in shots:
            labels = self.shot_labels(s.output(LABELS) or [] for s in samples)
            if not labels:
                continue
            for label in labels:
                video[label["name"]] += label["score"] * (shot.end_s - shot.start_s) / duration
            segments.append(
                OutputSegment(
                    "label",
                    shot.start_s,
                    shot.end_s,
                    ", ".join(label["name"] for label in labels),
                    {"shot": shot.index, "labels": labels},
                )
            )
        ranked = sorted(video.items(), key=lambda item: -item[1])[: 2 * self._settings.max_labels]
        data = {"labels": [{"name": name, "score": round(score, 4)} for name, score in ranked]}
        return VideoOutput(data, tuple(segments))

    def shot_labels(self, samples: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The labels of a shot whose samples' classifications are ``samples``: its classes,
        then the broader kinds, most specific first, each with its share of the shot."""
        classes = imagenet_classes()
        by_class: dict[int, float] = defaultdict(float)
        count = 0
        for sample in samples:
            count += 1
            for entry in sample:
                by_class[int(entry["class"])] += float(entry["score"])
        if not count:
            return []
        by_kind: dict[str, float] = defaultdict(float)
        for index, total in by_class.items():
            for kind in classes[index].kinds:
                by_kind[kind] += total / count
        floor = self._settings.min_score
        found = [
            {"name": classes[i].name, "score": round(total / count, 4), "broader": False}
            for i, total in sorted(by_class.items(), key=lambda item: -item[1])
            if total / count >= floor
        ]
        found += [
            {"name": kind, "score": round(score, 4), "broader": True}
            for kind, score in sorted(by_kind.items(), key=lambda item: _specificity(item[0]))
            if score >= floor and kind not in {label["name"] for label in found}
        ]
        return found[: self._settings.max_labels]


@cache
def _specificity(kind: str) -> int:
    """How many classes a kind holds: fewer is more specific ("dog" before "animal")."""
    return sum(kind in c.kinds for c in imagenet_classes())


def _samples_by_shot(
    frames: Sequence[Frame], duration_s: float
) -> list[tuple[ShotSegment, list[Frame]]]:
    """Each shot with the samples taken in it (from its start to the next shot's)."""
    shots = video_shots(frames, duration_s)
    starts = [shot.start_s for shot in shots]
    members: list[list[Frame]] = [[] for _ in shots]
    for frame in frames:
        members[max(bisect_right(starts, frame.timestamp_s) - 1, 0)].append(frame)
    return list(zip(shots, members, strict=True))
