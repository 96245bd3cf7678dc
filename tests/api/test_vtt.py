"""WebVTT rendering: times, order, escaping, and cues that would break a player."""

from __future__ import annotations

from api.vtt import Cue, webvtt


def test_cues_in_order_with_hours_and_escapes() -> None:
    text = webvtt([Cue(3725.5, 3726.0, "late"), Cue(0.0, 1.25, "a <b> & c\n\nsecond line --> on")])
    assert text == (
        "WEBVTT\n\n"
        "1\n00:00:00.000 --> 00:00:01.250\na &lt;b&gt; &amp; c\nsecond line --&gt; on\n\n"
        "2\n01:02:05.500 --> 01:02:06.000\nlate\n"
    )


def test_empty_and_instant_cues_stay_valid() -> None:
    assert webvtt([]) == "WEBVTT\n"
    text = webvtt([Cue(2.0, 2.0, "   ")])
    assert text == "WEBVTT\n\n1\n00:00:02.000 --> 00:00:02.001\n \n"
