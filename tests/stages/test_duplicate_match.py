"""The alignment of two fingerprint sequences: a copy found at its speed and offset with its
span, a piece found inside a longer video, and no copy where two videos share only a title
card, or nothing."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stages.duplicate_match import Rules, align

RULES = Rules()


def shots(rng: np.random.Generator, count: int, per_shot: int = 6) -> NDArray[np.uint64]:
    """Hashes of ``count`` samples: shots of ``per_shot`` whose hashes drift 2 bits a sample."""
    values: list[int] = []
    for i in range(count):
        if i % per_shot == 0:
            values.append(int(rng.integers(0, 1 << 62)) << 1)
        else:
            values.append(
                values[-1] ^ (1 << int(rng.integers(1, 64))) ^ (1 << int(rng.integers(1, 64)))
            )
    return np.asarray(values, dtype=np.uint64)


def noisy(hashes: NDArray[np.uint64], rng: np.random.Generator, bits: int) -> NDArray[np.uint64]:
    """Each hash with ``bits`` random bits flipped (a re-encoded copy)."""
    out = hashes.copy()
    for i in range(out.size):
        for bit in rng.choice(np.arange(1, 64), size=bits, replace=False):
            out[i] ^= np.uint64(1 << int(bit))
    return out


def test_a_copy_at_another_speed_is_found_with_its_span() -> None:
    rng = np.random.default_rng(1)
    original = shots(rng, 60)
    times = np.arange(60, dtype=np.float64)
    # The copy: 10% faster, so its sample at t shows the original at 1.1 t.
    copy_times = np.arange(54, dtype=np.float64)
    copy = noisy(original[np.round(1.1 * copy_times).astype(int).clip(0, 59)], rng, 6)
    found = align(copy_times, copy, times, original, RULES)
    assert found is not None
    assert abs(found.speed - 1.1) <= 0.02
    assert found.score > 0.9
    (span,) = found.spans
    assert span.start_s == 0.0
    assert span.end_s >= 53.0
    assert abs(span.other_end_s - 1.1 * span.end_s) < 1.0


def test_a_clip_is_found_inside_the_longer_video_and_the_other_way_round() -> None:
    rng = np.random.default_rng(2)
    original = shots(rng, 120)
    times = np.arange(120, dtype=np.float64)
    clip_times = np.arange(30, dtype=np.float64) + 0.4  # sampled between the original's
    clip = noisy(original[45:75], rng, 4)
    found = align(clip_times, clip, times, original, RULES)
    assert found is not None
    assert found.score > 0.9
    (span,) = found.spans
    assert abs(span.other_start_s - 45.0) <= 1.0
    assert abs(span.other_end_s - 75.0) <= 1.0
    back = align(times, original, clip_times, clip, RULES)
    assert back is not None
    (span,) = back.spans
    assert abs(span.start_s - 45.0) <= 1.0
    assert abs(span.other_start_s - 0.4) <= 1.0


def test_a_shared_title_card_or_nothing_in_common_is_no_copy() -> None:
    rng = np.random.default_rng(3)
    card = np.full(5, int(rng.integers(0, 1 << 62)) << 1, dtype=np.uint64)
    first = np.concatenate([card, shots(rng, 40)])
    second = np.concatenate([card, shots(rng, 40)])
    times = np.arange(45, dtype=np.float64)
    assert align(times, first, times, second, RULES) is None  # one picture held for 5 s
    assert align(times, shots(rng, 45), times, shots(rng, 45), RULES) is None
    # A rule that takes one picture as enough finds the card.
    loose = Rules(min_distinct=1)
    found = align(times, first, times, second, loose)
    assert found is not None
    assert found.spans[0].end_s <= 6.0


def test_empty_sequences_align_to_nothing() -> None:
    empty = np.zeros(0, dtype=np.uint64)
    times = np.arange(3, dtype=np.float64)
    assert align(np.zeros(0), empty, times, np.ones(3, dtype=np.uint64), RULES) is None
