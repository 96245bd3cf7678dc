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


def _saw(peak_step: int) -> list[dict[str, int]]:
    """Samples whose fragments climb by 5 a sample and are compacted back every 11 samples,
    so the second half (from 1,000 videos) is one tooth from its foot to its top; the second
    half's top ``peak_step`` higher than the first half's."""
    samples = _samples(None)
    for sample in samples:
        k = sample["videos"] // 100  # 1..20
        sample["lance_fragments"] = 5 + ((k - 10) % 11) * 5 + (k >= 10) * peak_step
    return samples


def test_a_compaction_saw_with_bounded_teeth_passes_and_one_with_rising_teeth_fails() -> None:
    # Where the teeth fall in the second half makes its fitted slope large either way.
    bounded = _report(_saw(0), videos=2000, keep=200)["growth"]["lance_fragments"]
    assert bounded["second_half_growth"] > 0.05
    assert bounded["peak_second_half"] <= bounded["peak_first_half"]
    assert bounded["levelled"]

    rising = _report(_saw(15), videos=2000, keep=200)
    fragments = rising["growth"]["lance_fragments"]
    assert fragments["peak_second_half"] > fragments["peak_first_half"]
    assert not fragments["levelled"]
    assert not rising["ok"]


def test_only_the_lance_series_are_judged_as_saws() -> None:
    samples = _saw(0)
    for sample in samples:
        sample["redis_keys"] = sample["lance_fragments"]  # the same saw, in a series that is none
    report = _report(samples, videos=2000, keep=200)
    assert not report["growth"]["redis_keys"]["levelled"]
    assert report["growth"]["lance_fragments"]["levelled"]
