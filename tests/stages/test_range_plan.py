"""Where a video is cut into ranges (``stages.ranges.plan_ranges``): each range after the
first also decodes from the key frame ``warm_up_s`` ahead of it, so the cut leaves the first
range longer, and a range that would not end sooner than the rest is not made."""

from __future__ import annotations

import bisect

from stages.ranges import Timeline, VideoRange, plan_ranges

FPS = 25


def timeline(seconds: float, key_every_s: float | None = None) -> Timeline:
    """Frames at 25 fps, key frames every ``key_every_s`` (None: the first frame only)."""
    times = [i / FPS for i in range(round(seconds * FPS))]
    step = round(key_every_s * FPS) if key_every_s is not None else len(times)
    return Timeline(times, times[::step])


def plan(line: Timeline, *, parts: int, warm_up_s: float, min_s: float = 5.0) -> list[VideoRange]:
    return plan_ranges(
        line, fps=1.0, chunk_size=4, start=None, parts=parts, min_s=min_s, warm_up_s=warm_up_s
    )


def decoded_s(line: Timeline, ranges: list[VideoRange], warm_up_s: float) -> list[float]:
    """Seconds of video each range decodes: from the key frame its decoder seeks to (the
    first from 0) to the last sample of its last chunk (the last to the video's end)."""
    spans = []
    for r in ranges:
        begin = 0.0
        if r.start is not None:
            target = r.start.after_s - warm_up_s
            begin = line.key_times[max(0, bisect.bisect_right(line.key_times, target) - 1)]
        # At 1 fps, 4 samples per chunk: the last sample of chunk n - 1 is at 4n - 1 s.
        end = line.times[-1] if r.end_chunk is None else 4.0 * r.end_chunk - 1.0
        spans.append(end - begin)
    return spans


def test_without_a_warm_up_the_ranges_are_even() -> None:
    line = timeline(60.0, key_every_s=1.0)
    ranges = plan(line, parts=2, warm_up_s=0.0)
    assert [r.end_chunk for r in ranges] == [8, None]  # 15 chunks of 4 s: 8 and 7
    assert ranges[1].start is not None
    assert (ranges[1].start.chunk_index, ranges[1].start.sample_index) == (8, 32)


def test_the_first_range_takes_more_when_the_others_warm_up_first() -> None:
    line = timeline(60.0, key_every_s=1.0)
    ranges = plan(line, parts=2, warm_up_s=10.0)
    spans = decoded_s(line, ranges, 10.0)
    # Cut in the middle, the second range would decode 40 s; cut at 36 s, both about 35.
    assert len(ranges) == 2
    assert abs(spans[0] - spans[1]) <= 4.0  # within one chunk
    assert max(spans) < 40.0 - 1.0


def test_three_ranges_when_they_end_sooner_than_two() -> None:
    line = timeline(60.0, key_every_s=1.0)
    two = decoded_s(line, plan(line, parts=2, warm_up_s=5.0), 5.0)
    three = decoded_s(line, plan(line, parts=3, warm_up_s=5.0), 5.0)
    assert (len(two), len(three)) == (2, 3)
    assert max(three) < max(two)


def test_a_video_with_one_key_frame_stays_whole() -> None:
    # Every range would decode from the start: none would end sooner than the whole.
    line = timeline(60.0, key_every_s=None)
    assert plan(line, parts=4, warm_up_s=5.0) == [VideoRange(None, None)]


def test_no_range_starts_where_it_would_not_shorten_the_longest() -> None:
    # Key frames at 0 and 30 s of 40 s: a range starting before 30 s decodes from 0, so of
    # three ranges asked for, two are made, cut where the second key frame lets one begin.
    line = timeline(40.0, key_every_s=30.0)
    ranges = plan(line, parts=3, warm_up_s=0.0)
    assert len(ranges) == 2
    assert max(decoded_s(line, ranges, 0.0)) <= 32.0
