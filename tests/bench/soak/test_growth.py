"""bench.soak.growth's verdict: a series that levels off passes, one that keeps growing fails."""

from __future__ import annotations

from bench.soak.growth import SERIES, _report


def _samples(grow: str | None) -> list[dict[str, int]]:
    samples = []
    for n in range(1, 21):
        videos = n * 100
        sample = {"videos": videos, "elapsed_s": n * 10}
        for name in SERIES:
            # Rises while the library fills (first 200 videos), then flat, give or take.
            sample[name] = 1000 + min(videos, 200) * 5 + (n % 2)
            if name == grow:
                sample[name] += videos  # never stops
        samples.append(sample)
    return samples


def test_series_that_level_off_pass() -> None:
    report = _report(_samples(None), videos=2000, keep=200)
    assert report["ok"]
    assert all(g["second_half_growth"] < 0.05 for g in report["growth"].values())


def test_a_series_that_keeps_growing_fails_with_its_slope() -> None:
    report = _report(_samples("redis_keys"), videos=2000, keep=200)
    assert not report["ok"]
    keys = report["growth"]["redis_keys"]
    assert keys["second_half_growth"] > 0.05
    assert keys["slope_per_1000_videos"] == 1000.0
    assert report["growth"]["objects"]["second_half_growth"] < 0.05
