"""``bench.perf.stage_cost``'s speech figures on a short talking video, with Whisper base (the
default) and tiny.en: the keys are there, each model heard the talk, and the cost figures are
consistent with one another and side by side. No speed is asserted: the numbers belong in
reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.perf.stage_cost import SENTENCE_EVERY_S, speech_costs, speech_line, talk
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
def test_speech_cost_of_both_models_on_a_short_talk(tmp_path: Path) -> None:
    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed (scripts/bootstrap.sh installs it)")
    config = ServiceConfig.load(
        limits={"file_roots": (str(tmp_path),)},
        runtime={"workdir": str(tmp_path / "work"), "executor": "local"},
    )
    report = speech_costs(8.0, config, tmp_path)
    side_by_side = report["speech_cpu_s_per_audio_s"]
    assert isinstance(side_by_side, dict)
    for key, model in (("speech", "base"), ("speech_tiny_en", "tiny.en")):
        figures = report[key]
        assert isinstance(figures, dict)

        def number(name: str, figures: dict[str, object] = figures) -> float:
            value = figures[name]
            assert isinstance(value, int | float), (name, value)
            return float(value)

        # The model the key names, whatever the environment's setting.
        assert figures["model"] == model
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
        assert number("cpu_s_per_audio_s") == pytest.approx(cpu_s / audio_s, rel=0.05)
        assert number("real_time_factor") == pytest.approx(wall_s / audio_s, rel=0.05)
        assert side_by_side[model] == figures["cpu_s_per_audio_s"]
    assert side_by_side["ratio"] == pytest.approx(
        side_by_side["base"] / side_by_side["tiny.en"], rel=0.05
    )
    line = speech_line(report)
    assert "base" in line
    assert "tiny.en" in line
