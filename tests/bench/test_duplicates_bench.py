"""bench.duplicates' scoring and its synthetic library: precision over everything found,
recall by change, and synthetic fingerprints that drift within a shot as real ones do."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.duplicate_cases import Video
from bench.duplicates import score, synthetic_rows


def test_precision_counts_every_wrong_find_and_recall_is_by_change() -> None:
    videos = [
        Video("a", Path("a.mp4"), library=True),
        Video("b", Path("b.mp4"), library=True),
        Video("a-logo", Path("x.mp4"), original="a", change="logo"),
        Video("b-logo", Path("x.mp4"), original="b", change="logo"),
        Video("a-mirrored", Path("x.mp4"), original="a", change="mirrored"),
        Video("lookalike", Path("x.mp4")),
    ]
    found = {"a-logo": ["a"], "b-logo": ["a"], "a-mirrored": ["a", "b"], "lookalike": ["b"]}
    scored = score(videos, found)
    assert scored["recall_by_transformation"] == {"logo": 0.5, "mirrored": 1.0}
    assert (scored["found"], scored["false_matches"], scored["copies"]) == (2, 3, 3)
    assert scored["precision"] == 0.4
    assert scored["recall"] == round(2 / 3, 4)


def test_synthetic_fingerprints_drift_within_shots() -> None:
    rows = synthetic_rows(20, {})
    assert rows.num_rows == 20 * 60
    hashes = rows["hash"].to_numpy().view(np.uint64)
    assert not np.any(hashes >> np.uint64(63))  # the DC term's bit is never set
    drift = np.bitwise_count(hashes[1:60] ^ hashes[:59])
    within = [d for i, d in enumerate(drift.tolist(), start=1) if i % 8 != 0]
    assert max(within) <= 3
    assert min(d for i, d in enumerate(drift.tolist(), start=1) if i % 8 == 0) > 10
    assert rows["video_id"][60].as_py() == "synthetic-1"
