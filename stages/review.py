"""Review labels with evidence: what a platform's reviewers act on, once per video.

The ``review`` video stage reads what the other stages found and scores four categories, each
score with its evidence (where, when, what, and the frame and box where there is one):

- ``contact``: phone numbers, WeChat / QQ / Telegram ids, links and e-mail addresses that draw
  users off the platform, in on-screen text, in speech and in the text of QR codes
  (``stages.review_text``);
- ``qr``: QR codes shown in the frames (the ``qr`` frames stage), whatever they hold;
- ``terms``: the operator's term lists (``stages.review.terms_dir``), in on-screen text, speech
  and the VLM's descriptions, matched on normalised text;
- ``visual``: the safety labels of the VLM's descriptions, where a VLM runs, and what the
  visual detectors (the ``detect`` frames stage) find under the labels
  ``stages.review.visual_labels`` names, with the box (a nudity detector's ``EXPOSED_*``).

Faces (the ``faces`` detector) are no finding: they are counted per shot (``faces``: the most
seen in one sample of each shot), for a reviewer to know who is on screen and when.

A category's score is the chance that at least one of its findings is right (each finding's
confidence, combined as independent: ``1 - prod(1 - c)``, over distinct values and sources),
and its decision ``pass``, ``review`` or ``block`` follows its thresholds (the tenant's where
set); the video's decision is its categories' worst. Each finding is a segment of kind
``review`` (search finds them: "phone", a domain). It reads stored results only: added to
finished videos it decodes nothing (QR codes need pixels: only videos analysed with the ``qr``
stage have them).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config import ReviewSettings, ServiceConfig
from core.outputs import OutputSegment, VideoOutput
from core.records import Frame, VideoResult
from core.review_settings import REVIEW_CATEGORIES, Decision, ReviewCategory
from core.shots import video_shots
from core.spans import text_spans
from core.stage_names import DETECT, QR, REVIEW
from models.detectors import FACES
from stages.base import VideoStage
from stages.review_text import TermLists, TextHit, find_contacts

# Bump when the rules change what is found or how it is scored.
RULES_REVISION = 2
# A QR code shown is itself a way off the platform, whatever it holds.
_QR_CONFIDENCE = 0.9
# The VLM's safety labels carry no score of their own.
_VLM_CONFIDENCE = 0.8
_SEVERITY: dict[Decision, int] = {"pass": 0, "review": 1, "block": 2}


@dataclass(frozen=True)
class Finding:
    """One piece of evidence: what was found, where, and how sure."""

    category: ReviewCategory
    kind: str  # phone, wechat, url, qr, term, nudity...
    source: str  # text, speech, qr, description
    value: str  # what it is, normalised (the digits, the host, the term)
    text: str  # what was shown or said around it
    start_s: float
    end_s: float
    confidence: float
    frame_s: float | None = None  # a sample that shows it
    box: tuple[tuple[float, float], ...] | None = None
    list_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "kind": self.kind,
            "source": self.source,
            "value": self.value,
            "text": self.text,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "confidence": round(self.confidence, 4),
            "frame_s": self.frame_s,
            "box": None if self.box is None else [[float(x), float(y)] for x, y in self.box],
            "list": self.list_name,
        }


class ReviewStage(VideoStage):
    """Scores ``contact``, ``qr``, ``terms`` and ``visual`` with their evidence, and decides."""

    name = REVIEW
    reads = ("ocr_lines", "speech", QR, DETECT, "description")
    segment_kinds = ("review",)
    searchable = ("review",)

    def __init__(self, settings: ReviewSettings) -> None:
        self._settings = settings
        folder = settings.terms_dir
        self._terms = TermLists(
            Path(folder) if folder else None, check_every_s=settings.terms_check_s
        )

    @classmethod
    def build(cls, config: ServiceConfig) -> ReviewStage | None:
        return cls(config.stages.review) if config.stages.review.enabled else None

    def version_params(self) -> Mapping[str, object]:
        # The term lists are read again when they change, without a new version: a list
        # changed applies to the videos analysed from then on.
        settings = self._settings.model_dump(
            mode="json", include={"thresholds", "tenant_thresholds", "visual_labels"}
        )
        return {**settings, "rules": RULES_REVISION, "max_evidence": self._settings.max_evidence}

    def analyse(self, result: VideoResult) -> VideoOutput:
        findings = [
            *self._on_screen(result.frames),
            *self._said(result),
            *_qr_codes(result.frames, result.probe.duration_s),
            *_described(result.frames, result.probe.duration_s),
            *_detected(result.frames, result.probe.duration_s, self._settings.visual_labels),
        ]
        judged = self.judged(findings, result.ref.tenant)
        if FACES not in self._settings.detectors or all(
            frame.output(DETECT) is None for frame in result.frames
        ):
            return judged
        faces = _faces_per_shot(result.frames, result.probe.duration_s)
        return VideoOutput({**judged.data, "faces": faces}, judged.segments)

    def judged(self, findings: Sequence[Finding], tenant: str) -> VideoOutput:
        """The categories' scores and decisions from ``findings``, and the video's decision."""
        by_category: dict[ReviewCategory, list[Finding]] = defaultdict(list)
        for finding in findings:
            by_category[finding.category].append(finding)
        categories: dict[str, Any] = {}
        decision: Decision = "pass"
        segments: list[OutputSegment] = []
        for category in REVIEW_CATEGORIES:
            found = sorted(by_category[category], key=lambda f: (-f.confidence, f.start_s))
            score = _combined(found)
            verdict = self._settings.thresholds_for(tenant, category).decide(score)
            kept = found[: self._settings.max_evidence]
            categories[category] = {
                "score": round(score, 4),
                "decision": verdict,
                "findings": len(found),
                "evidence": [f.to_json() for f in kept],
            }
            if _SEVERITY[verdict] > _SEVERITY[decision]:
                decision = verdict
            segments.extend(_segment(f) for f in kept)
        data = {"decision": decision, "categories": categories, "term_lists": self._terms.lists}
        return VideoOutput(data, tuple(sorted(segments, key=lambda s: (s.start_s, s.end_s))))

    def _on_screen(self, frames: Sequence[Frame]) -> Iterable[Finding]:
        for span in text_spans(frames):
            for category, hit in self._hits(span.text):
                when = (span.start_s, span.end_s)
                yield _finding(category, hit, "text", span.text, when, box=span.box)

    def _said(self, result: VideoResult) -> Iterable[Finding]:
        speech = result.speech
        for segment in speech.segments if speech is not None else ():
            for category, hit in self._hits(segment.text):
                when = (segment.start_s, segment.end_s)
                yield _finding(category, hit, "speech", segment.text, when, box=None)

    def _hits(self, text: str) -> Iterable[tuple[ReviewCategory, TextHit]]:
        for hit in find_contacts(text):
            yield "contact", hit
        for hit in self._terms.find(text):
            yield "terms", hit


Box = tuple[tuple[float, float], ...]


def _finding(
    category: ReviewCategory,
    hit: TextHit,
    source: str,
    text: str,
    when: tuple[float, float],
    *,
    box: Box | None,
) -> Finding:
    """A text rule's hit as a finding; shown text (with a box) points at its first sample."""
    return Finding(
        category=category,
        kind=hit.kind,
        source=source,
        value=hit.value,
        text=text,
        start_s=when[0],
        end_s=when[1],
        confidence=hit.confidence,
        frame_s=when[0] if box is not None else None,
        box=box,
        list_name=hit.list_name,
    )


def _qr_codes(frames: Sequence[Frame], duration_s: float) -> Iterable[Finding]:
    """Each QR code shown, once per text, from the first sample that shows it to the end of
    the last (the box where it was first read): a ``qr`` finding, and the contact details its
    text holds."""
    shown: dict[str, tuple[Frame, Frame, Any]] = {}  # text -> first sample, last, its code
    for frame in frames:
        for code in frame.output(QR) or ():
            text = str(code.get("text", ""))
            first, _, first_code = shown.get(text, (frame, frame, code))
            shown[text] = (first, frame, first_code)
    ends = _sample_ends(frames, duration_s)
    for text, (first, last, code) in shown.items():
        box = tuple((float(x), float(y)) for x, y in code.get("box") or ())
        when = (first.timestamp_s, ends.get(last.timestamp_s, last.timestamp_s))
        yield Finding(
            category="qr",
            kind="qr",
            source="qr",
            value=text,
            text=text,
            start_s=when[0],
            end_s=when[1],
            confidence=_QR_CONFIDENCE,
            frame_s=first.timestamp_s,
            box=box or None,
        )
        for hit in find_contacts(text):
            yield _finding("contact", hit, "qr", text, when, box=box or None)


def _described(frames: Sequence[Frame], duration_s: float) -> Iterable[Finding]:
    """The safety labels of the VLM's descriptions, one finding per label and sample."""
    ends = _sample_ends(frames, duration_s)
    for frame in frames:
        for label in (frame.description or {}).get("safety") or ():
            yield Finding(
                category="visual",
                kind=str(label),
                source="description",
                value=str(label),
                text=str((frame.description or {}).get("caption", "")),
                start_s=frame.timestamp_s,
                end_s=ends.get(frame.timestamp_s, frame.timestamp_s),
                confidence=_VLM_CONFIDENCE,
                frame_s=frame.timestamp_s,
            )


def _detected(
    frames: Sequence[Frame], duration_s: float, labels: Mapping[str, Mapping[str, float]]
) -> Iterable[Finding]:
    """What the visual detectors found under a label ``labels`` weighs, one finding per
    detection, its confidence the detection's score times the label's weight."""
    ends = _sample_ends(frames, duration_s)
    for frame in frames:
        for found in frame.output(DETECT) or ():
            weight = labels.get(str(found["detector"]), {}).get(str(found["label"]))
            if weight is None:
                continue
            x0, y0, x1, y1 = (float(v) for v in found["box"])
            yield Finding(
                category="visual",
                kind=str(found["label"]),
                source=str(found["detector"]),
                value=str(found["label"]),
                text="",
                start_s=frame.timestamp_s,
                end_s=ends.get(frame.timestamp_s, frame.timestamp_s),
                confidence=float(found["score"]) * weight,
                frame_s=frame.timestamp_s,
                box=((x0, y0), (x1, y0), (x1, y1), (x0, y1)),
            )


def _faces_per_shot(frames: Sequence[Frame], duration_s: float) -> list[dict[str, Any]]:
    """Each shot with the most faces one of its samples shows (0 where none does)."""
    shots = video_shots(frames, duration_s)
    starts = [shot.start_s for shot in shots]
    most = [0] * len(shots)
    for frame in frames:
        faces = sum(1 for found in frame.output(DETECT) or () if found["detector"] == FACES)
        shot = max(bisect_right(starts, frame.timestamp_s) - 1, 0)
        most[shot] = max(most[shot], faces)
    return [
        {"shot": shot.index, "start_s": shot.start_s, "end_s": shot.end_s, "max_faces": n}
        for shot, n in zip(shots, most, strict=True)
    ]


def _sample_ends(frames: Sequence[Frame], duration_s: float) -> dict[float, float]:
    """Each sample's time -> the next sample's, or the video's end for the last (a sample
    stands for the time until the next)."""
    times = sorted({frame.timestamp_s for frame in frames})
    return dict(zip(times, [*times[1:], max([duration_s, *times[-1:]])], strict=False))


def _combined(findings: Sequence[Finding]) -> float:
    """The chance that at least one finding is right, each distinct value and source counted
    once at its highest confidence."""
    best: dict[tuple[str, str, str], float] = {}
    for f in findings:
        key = (f.kind, f.value, f.source)
        best[key] = max(best.get(key, 0.0), f.confidence)
    return 1.0 - math.prod(1.0 - c for c in best.values())


def _segment(finding: Finding) -> OutputSegment:
    text = f"{finding.category}: {finding.kind} {finding.value}"
    return OutputSegment("review", finding.start_s, finding.end_s, text, finding.to_json())
