"""``bench.perf.stage_cost``'s speech figures on a short talking video: the keys are there, the
stage heard the talk, and the cost figures are consistent with one another. No speed is
asserted: the numbers belong in reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.perf.stage_cost import SENTENCE_EVERY_S, speech_cost, talk
from core.config import ServiceConfig
from devkit.speech_videos import espeak_path


def test_the_talk_fills_the_seconds_without_overlap() -> None:
    script = talk(20.0)
    starts = [start for start, _ in script]
    assert starts == [i * SENTENCE_EVERY_S for i in range(len(script))]
    assert len(script) == 5  # the last from 14 s, ending before 17 s
    assert all(text and not any(ch.isdigit() for ch in text) for _, text in script)
    assert len({text for _, text in script}) == len(script)
    assert talk(1.0) == script[:1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_speech_cost_on_a_short_talk(tmp_path: Path) -> None:
    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed (scripts/bootstrap.sh installs it)")
    config = ServiceConfig.load(
        limits={"file_roots": (str(tmp_path),)},
        runtime={"workdir": str(tmp_path / "work"), "executor": "local"},
    )
    figures = speech_cost(8.0, config, tmp_path)

    def number(key: str) -> float:
        value = figures[key]
        assert isinstance(value, int | float), (key, value)
        return float(value)

    assert figures["status"] == "done"
    assert figures["word_timestamps"] is True
    assert figures["windows"] == 1
    audio_s = number("audio_s")
    assert 8.0 <= audio_s < 9.0
    assert 0 < number("spoken_s") < audio_s
    assert number("words") >= 10  # two sentences, of 6 and 9 words
    assert number("load_s") > 0
    cpu_s, wall_s = number("cpu_s"), number("wall_s")
    assert cpu_s > 0
    assert wall_s > 0
    assert number("cpu_ms_per_audio_s") == pytest.approx(1000 * cpu_s / audio_s, rel=0.05)
    assert number("real_time_factor") == pytest.approx(wall_s / audio_s, rel=0.05)
