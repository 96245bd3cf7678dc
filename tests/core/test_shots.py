"""``video_shots``: shots from the boundaries the samples carry."""

from __future__ import annotations

from core.records import Frame, ShotBoundary
from core.shots import ShotSegment, video_shots


def sample(index: int, t: float, *boundaries: ShotBoundary) -> Frame:
    return Frame(index, t, None, boundaries=boundaries)


def test_no_boundary_is_one_shot_to_the_end() -> None:
    (shot,) = video_shots([sample(0, 0.0), sample(1, 1.0)], duration_s=2.5)
    assert (shot.start_s, shot.end_s, shot.entered_by, shot.keyframe, shot.samples) == (
        0.0,
        2.5,
        "start",
        0,
        2,
    )


def test_a_gradual_shot_is_shown_after_its_transition() -> None:
    dissolve = ShotBoundary(2.0, "gradual", 18.0, 1.6, 2.4)
    frames = [sample(0, 0.0), sample(1, 1.0), sample(2, 2.0, dissolve), sample(3, 3.0)]
    first, second = video_shots(frames, duration_s=4.0)
    assert (first.end_s, first.samples) == (2.0, 2)
    assert second.entered_by == "gradual"
    assert second.transition_s == (1.6, 2.4)
    assert (second.keyframe, second.keyframe_s) == (3, 3.0)  # 2.0 is mid-dissolve


def test_the_keyframe_is_the_sample_with_the_thumbnail() -> None:
    # Sampled by rate, the sample on the cut (2.0) is taken before the cut is confirmed; the
    # next one carries the boundary and the shot's thumbnail.
    cut = ShotBoundary(2.0, "cut", 40.0, 2.0, 2.0)
    frames = [sample(0, 0.0), sample(1, 1.0), sample(2, 2.0), sample(3, 3.0, cut), sample(4, 4.0)]
    frames[0].thumbnail = frames[3].thumbnail = b"jpeg"
    first, second = video_shots(frames, duration_s=5.0)
    assert first.keyframe == 0
    assert (second.start_s, second.samples, second.keyframe) == (2.0, 3, 3)
    frames[3].thumbnail = None  # none in the shot: its first sample
    assert video_shots(frames, duration_s=5.0)[1].keyframe == 2


def test_a_shot_no_sample_fell_in_has_no_keyframe() -> None:
    cut_a = ShotBoundary(1.2, "cut", 40.0, 1.2, 1.2)
    cut_b = ShotBoundary(1.7, "cut", 40.0, 1.7, 1.7)
    frames = [sample(0, 0.0), sample(1, 2.0, cut_a, cut_b), sample(2, 4.0)]
    shots = video_shots(frames, duration_s=0.0)  # unknown: ends at the last sample
    assert [(s.start_s, s.end_s, s.keyframe) for s in shots] == [
        (0.0, 1.2, 0),
        (1.2, 1.7, None),
        (1.7, 4.0, 1),
    ]
    assert shots[-1].samples == 2  # the last sample belongs to the last shot


def test_json_round_trip() -> None:
    dissolve = ShotBoundary(2.0, "gradual", 18.0, 1.6, 2.4)
    for shot in video_shots([sample(0, 0.0), sample(1, 3.0, dissolve)], 4.0):
        assert ShotSegment.from_json(shot.to_json()) == shot
    assert video_shots([], 0.0)[0].samples == 0
