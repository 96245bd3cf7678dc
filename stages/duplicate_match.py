"""Whether one video copies another, and where: the alignment of two fingerprint sequences.

A copy shows the original's frames in the same order, maybe faster or slower and from
another start: the sample at ``t`` in the copy is near the original's at ``speed * t +
offset``. The pairs of samples whose hashes are close vote for a ``(speed, offset)``; the
alignment with most votes is then checked on every sample of the copy, not only those that
found the original: a stretch of samples near their aligned counterpart, with few gaps, is a
span. A span counts when it lasts ``min_span_s``, holds ``min_samples`` close samples and
shows ``min_distinct`` pictures that differ from each other: a title card or a logo sting
that two unrelated videos share is one picture held, and does not make them copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sinks.fingerprints import EVERY_S

# The speeds looked for, copy against original (a re-poster speeds up or slows down by 10%).
SPEEDS = np.round(np.arange(0.8, 1.2501, 0.025), 3)
_OFFSET_BIN_S = 2.0  # offsets voted into bins this wide
# A stretch of close samples goes on across this many seconds of samples that are not.
_GAP_S = 6.0
_ALIGNMENTS = 3  # alignments tried per pair of videos (pieces of one video at other offsets)


@dataclass(frozen=True)
class Rules:
    """When two sequences are copies (``DuplicateSettings``)."""

    max_distance: int = 16
    min_samples: int = 5
    min_span_s: float = 5.0
    min_distinct: int = 3


@dataclass(frozen=True)
class Span:
    """Where the copy shows the original: ``start_s``-``end_s`` of the video looked up,
    ``other_start_s``-``other_end_s`` of the other."""

    start_s: float
    end_s: float
    other_start_s: float
    other_end_s: float

    def to_json(self) -> dict[str, float]:
        return {
            "start_s": round(self.start_s, 2),
            "end_s": round(self.end_s, 2),
            "other_start_s": round(self.other_start_s, 2),
            "other_end_s": round(self.other_end_s, 2),
        }


@dataclass(frozen=True)
class Alignment:
    """Two sequences' spans, the share of the shorter one they cover, and the speed."""

    spans: tuple[Span, ...]
    samples: int  # close samples in the spans
    score: float
    speed: float


Floats = NDArray[np.float32] | NDArray[np.float64]
Hashes = NDArray[np.uint64]
Fit = tuple[float, float]  # (speed, offset): the other's time is speed * time + offset


@dataclass(frozen=True)
class _Pair:
    """The two sequences, and the distance of every sample of one to every one of the other."""

    times: Floats
    hashes: Hashes
    other_times: Floats
    distances: NDArray[np.int16]

    def vote(self, pairs: NDArray[np.intp]) -> Fit:
        """The fit most close pairs agree on, refined by least squares on the pairs that
        agree. Only each sample's closest pairs vote (the samples of a still shot are all
        close to each other; the counterpart is the closest), once a bin."""
        times, other_times = self.times, self.other_times
        distances = self.distances[pairs[:, 0], pairs[:, 1]]
        best_of_row = np.full(times.size, np.iinfo(np.int16).max, dtype=np.int16)
        np.minimum.at(best_of_row, pairs[:, 0], distances)
        pairs = pairs[distances <= best_of_row[pairs[:, 0]]]
        best = (-1, 1.0, 0.0)
        for speed in sorted(SPEEDS.tolist(), key=lambda s: abs(s - 1.0)):  # ties: nearer 1
            offsets = other_times[pairs[:, 1]] - speed * times[pairs[:, 0]]
            for shift in (0.0, 0.5):  # bins shifted by half: an offset at an edge is not split
                keys = np.floor(offsets / _OFFSET_BIN_S + shift).astype(np.int64)
                voters = np.unique(keys * times.size + pairs[:, 0])  # a vote per sample and bin
                values, counts = np.unique(voters // times.size, return_counts=True)
                top = int(np.argmax(counts))
                if counts[top] > best[0]:
                    chosen = keys == values[top]
                    best = (int(counts[top]), float(speed), float(np.median(offsets[chosen])))
        return _refined(times[pairs[:, 0]], other_times[pairs[:, 1]], (best[1], best[2]))

    def near(self, fit: Fit, max_distance: int) -> NDArray[np.int64]:
        """For each sample of the copy: the other's sample nearest its aligned time and within
        ``max_distance`` bits of it (of the two either side), -1 where there is none."""
        other_times = self.other_times
        predicted = fit[0] * self.times + fit[1]
        after = np.searchsorted(other_times, predicted)
        near = np.full(self.times.size, -1, dtype=np.int64)
        for i in range(self.times.size):
            best_distance = max_distance + 1
            for j in (int(after[i]) - 1, int(after[i])):
                if (
                    0 <= j < other_times.size
                    and abs(other_times[j] - predicted[i]) <= EVERY_S
                    and self.distances[i, j] < best_distance
                ):
                    best_distance, near[i] = int(self.distances[i, j]), j
        return near

    def span(self, run: tuple[int, int], fit: Fit) -> Span:
        start, end = float(self.times[run[0]]), float(self.times[run[1]]) + EVERY_S
        other_end = float(self.other_times[-1]) + EVERY_S
        return Span(
            start,
            end,
            min(max(0.0, fit[0] * start + fit[1]), other_end),
            min(max(0.0, fit[0] * end + fit[1]), other_end),
        )


def align(
    times: Floats, hashes: Hashes, other_times: Floats, other_hashes: Hashes, rules: Rules
) -> Alignment | None:
    """Where a sequence (``times``, ``hashes``) shows another, or None where it does not."""
    if times.size == 0 or other_times.size == 0:
        return None
    distances = np.bitwise_count(hashes[:, None] ^ other_hashes[None, :]).astype(np.int16)
    pair = _Pair(times, hashes, other_times, distances)
    pairs = np.argwhere(distances <= rules.max_distance)
    spans: list[Span] = []
    taken = np.zeros(times.size, dtype=bool)  # samples in a span already
    matched = 0
    speed = 1.0
    for _ in range(_ALIGNMENTS):
        pairs = pairs[~taken[pairs[:, 0]]]
        if len(np.unique(pairs[:, 0])) < rules.min_samples:
            break
        fit = pair.vote(pairs)
        near = pair.near(fit, rules.max_distance)
        near[taken] = -1
        for run in _runs(times, near):
            kept = [i for i in range(run[0], run[1] + 1) if near[i] >= 0]
            lasts = float(times[run[1]] - times[run[0]]) + EVERY_S
            if _is_copy(hashes[kept].tolist(), lasts, rules):
                speed = fit[0] if not spans else speed
                spans.append(pair.span(run, fit))
                taken[run[0] : run[1] + 1] = True
                matched += len(kept)
        predicted = fit[0] * times[pairs[:, 0]] + fit[1]
        pairs = pairs[np.abs(other_times[pairs[:, 1]] - predicted) > _OFFSET_BIN_S]
    if not spans:
        return None
    score = min(1.0, matched / min(times.size, other_times.size))
    return Alignment(tuple(sorted(spans, key=lambda s: s.start_s)), matched, score, speed)


def _refined(times: Floats, other_times: Floats, fit: Fit) -> Fit:
    """The least-squares line through the pairs within a bin of ``fit``, where they span
    enough time to tell a speed; ``fit`` otherwise."""
    agree = np.abs(other_times - (fit[0] * times + fit[1])) <= _OFFSET_BIN_S
    if np.count_nonzero(agree) < 3 or np.ptp(times[agree]) < 4 * EVERY_S:
        return fit
    speed, offset = np.polyfit(times[agree], other_times[agree], 1)
    if not SPEEDS[0] <= speed <= SPEEDS[-1]:
        return fit
    return round(float(speed), 3), float(offset)


def _runs(times: Floats, near: NDArray[np.int64]) -> list[tuple[int, int]]:
    """Stretches of samples near their counterpart, going on across gaps up to ``_GAP_S``:
    (first, last) sample indexes, both near."""
    runs: list[tuple[int, int]] = []
    first = last = -1
    for i in np.flatnonzero(near >= 0).tolist():
        if first >= 0 and times[i] - times[last] <= _GAP_S + EVERY_S:
            last = i
            continue
        if first >= 0:
            runs.append((first, last))
        first = last = i
    if first >= 0:
        runs.append((first, last))
    return runs


def _is_copy(hashes: list[int], lasts_s: float, rules: Rules) -> bool:
    """Whether a run of close samples is long enough, holds enough of them, and shows
    enough pictures that differ from each other."""
    if len(hashes) < rules.min_samples or lasts_s < rules.min_span_s:
        return False
    pictures: list[int] = []
    for value in hashes:
        if all((value ^ seen).bit_count() > rules.max_distance for seen in pictures):
            pictures.append(value)
            if len(pictures) >= rules.min_distinct:
                return True
    return False
