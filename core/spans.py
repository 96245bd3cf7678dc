"""On-screen text as spans: what text a video shows, where, and from when to when.

OCR reads each sampled frame on its own, so one caption held on screen for ten seconds comes
back as ten lines, some of them misread ("SERVER R0OM B7"), and now and then missing from a
sample altogether. ``text_spans`` merges the lines of consecutive samples into one span per
text and place. Two lines of neighbouring samples belong to one span when

- their texts are alike: normalised (NFKC, casefold, whitespace collapsed; dropped altogether
  in CJK text, where OCR puts spaces between characters at random), their
  ``difflib.SequenceMatcher`` ratio is at least ``SIMILARITY``, and no digit turned into
  another digit (a clock, a score or a price that changes is new text, not a misreading: OCR
  confuses digits with letters, O/0, l/1, S/5, B/8, far more than with each other), and
- their boxes overlap: IoU of the axis-aligned bounds at least ``MIN_IOU``;

or when their texts are identical and the box moved by less than its own size (a pan, a
scroll). A span survives up to ``max_gap`` samples without a reading of it (OCR flicker).
Spans without a letter or digit, and one-character spans read in a single sample, are
dropped: on moving backgrounds OCR reads such strays.
"""

from __future__ import annotations

import difflib
import itertools
import re
import statistics
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.records import Frame, OcrLine

SIMILARITY = 0.75
"""The least SequenceMatcher ratio of two readings of one text. A single misread character
gives (n-1)/n in an n-character text: 0.75 at four characters (欢迎光临 read as 欢迎光林), so
0.75 keeps every one-character misreading of four characters or more together. Different texts
shown one after the other in one place stay apart: on a corpus of signs, captions and CJK
labels, no two different texts scored above 0.65 unless they differed in one character only."""
MIN_IOU = 0.3
"""The least overlap of the bounds of two readings of one text that changed: a box jitters by a
few pixels between samples; another line in the same place rarely covers a third of it."""

Bounds = tuple[float, float, float, float]  # x0, y0, x1, y1

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


@dataclass(frozen=True)
class TextSpan:
    """One text on screen over consecutive samples.

    ``text`` is the most frequent reading (ties: the one read with the highest score), ``box``
    the per-coordinate median of the readings' bounds as four corners (top-left, top-right,
    bottom-right, bottom-left; a median, not a union, so one stray detection does not widen
    it), ``score`` the mean OCR score, ``frames`` the number of samples it was read in. It is
    on screen from ``start_s`` (its first sample) until ``end_s`` (the sample after its last).
    """

    text: str
    box: tuple[tuple[float, float], ...]
    start_s: float
    end_s: float
    score: float
    frames: int

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "box": [[float(x), float(y)] for x, y in self.box],
            "start_s": float(self.start_s),
            "end_s": float(self.end_s),
            "score": float(self.score),
            "frames": int(self.frames),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TextSpan:
        return cls(
            text=str(raw["text"]),
            box=tuple((float(x), float(y)) for x, y in raw["box"]),
            start_s=float(raw["start_s"]),
            end_s=float(raw["end_s"]),
            score=float(raw["score"]),
            frames=int(raw["frames"]),
        )


@dataclass
class _OpenSpan:
    first: int  # position of the first sample read in
    last: int  # position of the latest sample read in
    key: str  # the latest reading, normalised: what the next sample's lines are compared with
    bounds: Bounds  # the latest reading's bounds
    lines: list[OcrLine] = field(default_factory=list)


def text_spans(
    frames: Sequence[Frame],
    *,
    max_gap: int = 1,
    similarity: float = SIMILARITY,
    min_iou: float = MIN_IOU,
) -> list[TextSpan]:
    """The spans of on-screen text in ``frames`` (a video's samples, in any order), ordered by
    start time, then from the top of the frame down.

    Each sample's lines are matched with the spans still open (read within the last
    ``max_gap`` + 1 samples), best pair first, so the work is lines x open spans per sample.
    A span read in the last sample ends one sample interval (the median gap between sample
    times; 0 with a single sample) after it.
    """
    rules = _Rules(similarity, min_iou)
    ordered = sorted(frames, key=lambda f: (f.timestamp_s, f.index))
    times = [f.timestamp_s for f in ordered]
    open_spans: list[_OpenSpan] = []
    closed: list[_OpenSpan] = []
    for position, frame in enumerate(ordered):
        still_open: list[_OpenSpan] = []
        for span in open_spans:
            (still_open if position - span.last - 1 <= max_gap else closed).append(span)
        open_spans = still_open
        lines = [(line, key) for line in frame.ocr_lines if (key := normalise(line.text))]
        open_spans += rules.extend(open_spans, lines, position)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    interval = statistics.median(gaps) if gaps else 0.0
    spans = [_finish(span, times, interval) for span in closed + open_spans]
    spans = [span for span in spans if _worth_keeping(span)]
    return sorted(spans, key=lambda s: (s.start_s, s.box[0][1], s.box[0][0], s.text))


def _worth_keeping(span: TextSpan) -> bool:
    """Whether a span is text rather than OCR reading texture: it holds a letter or a digit,
    and a single character only counts when read in more than one sample. (On the quality
    corpus, ``bench.quality.pipeline``, every one-character span read once was a misreading of a
    moving background, "W", "_", "2", "二"; a real one-character sign stays on screen.)"""
    key = normalise(span.text)
    if not any(ch.isalnum() for ch in key):
        return False
    return len(key) > 1 or span.frames > 1


def normalise(text: str) -> str:
    """``text`` as readings are compared: NFKC, casefolded, whitespace collapsed (removed in
    CJK text)."""
    folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return folded.replace(" ", "") if _CJK.search(folded) else folded


@dataclass(frozen=True)
class _Rules:
    similarity: float
    min_iou: float

    def extend(
        self, spans: Sequence[_OpenSpan], lines: Sequence[tuple[OcrLine, str]], position: int
    ) -> list[_OpenSpan]:
        """Add each of one sample's lines (with their normalised text) to the open span it
        continues, best pair first; the new spans of the lines that continue none."""
        pairs: list[tuple[float, int, int]] = []
        for i, (line, key) in enumerate(lines):
            bounds = _bounds(line.box)
            for j, span in enumerate(spans):
                score = self.likeness(key, bounds, span)
                if score is not None:
                    pairs.append((-score, i, j))
        pairs.sort()
        taken_lines: set[int] = set()
        taken_spans: set[int] = set()
        for _, i, j in pairs:
            if i in taken_lines or j in taken_spans:
                continue
            taken_lines.add(i)
            taken_spans.add(j)
            line, key = lines[i]
            span = spans[j]
            span.last, span.key, span.bounds = position, key, _bounds(line.box)
            span.lines.append(line)
        return [
            _OpenSpan(position, position, key, _bounds(line.box), [line])
            for i, (line, key) in enumerate(lines)
            if i not in taken_lines
        ]

    def likeness(self, key: str, bounds: Bounds, span: _OpenSpan) -> float | None:
        """How alike a reading is to a span's latest one (higher: more alike), or None when
        it is other text."""
        overlap = _iou(bounds, span.bounds)
        if key == span.key:
            moved_little = _moved_little(bounds, span.bounds)
            return 1.0 + overlap if overlap >= self.min_iou or moved_little else None
        if overlap < self.min_iou:
            return None
        matcher = difflib.SequenceMatcher(None, key, span.key, autojunk=False)
        if matcher.real_quick_ratio() < self.similarity or matcher.quick_ratio() < self.similarity:
            return None
        ratio = matcher.ratio()
        if ratio < self.similarity or _digits_changed(matcher, key, span.key):
            return None
        return ratio + overlap


def _digits_changed(matcher: difflib.SequenceMatcher[str], a: str, b: str) -> bool:
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        changed = a[i1:i2] + b[j1:j2]
        if tag != "equal" and changed.isdecimal():
            return True
    return False


def _bounds(box: Sequence[tuple[float, float]]) -> Bounds:
    if not box:
        return (0.0, 0.0, 0.0, 0.0)
    xs = [x for x, _ in box]
    ys = [y for _, y in box]
    return (min(xs), min(ys), max(xs), max(ys))


def _iou(a: Bounds, b: Bounds) -> float:
    # Called for every line and open span of a sample: plain comparisons, early exits.
    ax0, ay0, ax1, ay1 = a
    bx0, by0, bx1, by1 = b
    width = (ax1 if ax1 < bx1 else bx1) - (ax0 if ax0 > bx0 else bx0)
    if width <= 0:
        return 0.0
    height = (ay1 if ay1 < by1 else by1) - (ay0 if ay0 > by0 else by0)
    if height <= 0:
        return 0.0
    inter = width * height
    union = (ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter
    return inter / union


def _moved_little(a: Bounds, b: Bounds) -> bool:
    """True when the centre of ``a`` is within ``b``'s own size of ``b``'s centre."""
    dx = (a[0] + a[2] - b[0] - b[2]) / 2
    dy = (a[1] + a[3] - b[1] - b[3]) / 2
    reach = max(b[2] - b[0], b[3] - b[1])
    return dx * dx + dy * dy <= reach * reach


def _finish(span: _OpenSpan, times: Sequence[float], interval: float) -> TextSpan:
    counts = Counter(line.text for line in span.lines)
    best_score: dict[str, float] = {}
    for line in span.lines:
        best_score[line.text] = max(line.score, best_score.get(line.text, line.score))
    # Most frequent, then highest score; among equals the earliest (Counter keeps first-seen order).
    text = max(counts, key=lambda t: (counts[t], best_score[t]))
    all_bounds = [_bounds(line.box) for line in span.lines]
    x0, y0, x1, y1 = (statistics.median(b[k] for b in all_bounds) for k in range(4))
    after = span.last + 1
    end = times[after] if after < len(times) else times[span.last] + interval
    return TextSpan(
        text=text,
        box=((x0, y0), (x1, y0), (x1, y1), (x0, y1)),
        start_s=times[span.first],
        end_s=end,
        score=statistics.fmean(line.score for line in span.lines),
        frames=len(span.lines),
    )
