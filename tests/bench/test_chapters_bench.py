"""``python -m bench.chapters --quick``: one talk of three topics, made with and without the
topic's title on its slides, through the real stages (decode, OCR, speech recognition,
chapters). Its chapters start where the topics change; the scoring is checked on its own. No
runtime is asserted: the numbers belong in reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chapters import TALKS, main, score, talk
from devkit.speech_videos import espeak_path


def test_scoring_pairs_each_true_boundary_once() -> None:
    # 40 and 41 both lie near 38: one counts; 90 lies near nothing.
    assert score([40.0, 41.0, 90.0], [38.0, 72.0]) == (3, 2, 1)
    assert score([], [36.0]) == (0, 1, 0)


def test_a_talk_changes_topic_at_a_cut_every_third_slide() -> None:
    made = talk(TALKS[1], 1)
    assert made.changes == (36.0, 72.0, 108.0)
    assert len(made.edit.shots) == 12
    assert all(any(abs(start - t) < 1 for start, _ in made.edit.speech) for t in (0.8, 36.8))


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng is not installed")
def test_quick_run_finds_the_topic_changes(tmp_path: Path) -> None:
    out = tmp_path / "chapters.json"
    assert main(["--quick", "--workdir", str(tmp_path / "work"), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["precision"] >= 0.8
    assert report["recall"] >= 0.8
    assert report["every_cut"]["precision"] < 0.5  # a chapter at every cut is mostly wrong
    titled = next(t for t in report["talks"] if t["talk"] == "talk0")
    assert titled["titles"] == ["BAKING BREAD", "OCEAN TIDES", "FIXING A BICYCLE"]
    assert all(len(t["summaries"]) == len(t["chapter_starts"]) + 1 for t in report["talks"])
