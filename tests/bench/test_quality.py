"""``python -m bench.quality --quick`` on its two short edits: the report has its keys and sane
values, and the clean edit (two hard cuts, one English caption) is found whole. The scoring is
checked on its own with made-up findings. No timing is asserted: the numbers belong in reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.quality import main as quality_main
from bench.quality_media import Caption, EditTruth, Shot, edit_truth
from bench.quality_score import score_shots, score_text
from core.spans import TextSpan

BOX = ((0.0, 0.0), (10.0, 0.0), (10.0, 5.0), (0.0, 5.0))


def span(text: str, start_s: float, end_s: float) -> TextSpan:
    return TextSpan(text, BOX, start_s, end_s, score=0.9, frames=2)


def ratios(report: dict[str, Any]) -> list[float | None]:
    shots, text = report["shots"], report["text_spans"]
    return [
        report["shot_precision"],
        report["shot_recall"],
        report["text_span_precision"],
        report["text_span_recall"],
        *report["shot_recall_by_kind"].values(),
        *shots["precision_by_found_kind"].values(),
        shots["kind_agreement"],
        *report["shots_fps_mode"]["recall_by_kind"].values(),
        text["precision"],
        text["recall"],
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_run_reports_every_aspect(tmp_path: Path) -> None:
    out = tmp_path / "quality.json"
    code = quality_main(["--quick", "--workdir", str(tmp_path / "work"), "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    for key in (
        "shot_precision",
        "shot_recall",
        "shot_recall_by_kind",
        "text_span_precision",
        "text_span_recall",
        "speech_wer",
        "speech_note",
        "shots_fps_mode",
        "corpus",
        "runtime",
    ):
        assert key in report, key
    assert report["speech_wer"] is None
    assert report["speech_note"]
    values = ratios(report)
    assert all(v is None or 0.0 <= v <= 1.0 for v in values), values
    assert None not in values[:4]
    assert report["corpus"]["videos"] == 2
    assert set(report["shot_recall_by_kind"]) == {"cut", "dissolve", "fade"}
    assert report["shots"]["counts"]["truth"] == 3  # two cuts and a dissolve
    assert report["runtime"]["total_s"] > 0
    text = report["text_spans"]
    assert text["start_error_s"] is not None
    assert text["start_error_s"] >= 0
    clean = report["edits"]["clean-cuts"]
    assert clean["shots"]["recall_by_kind"]["cut"] == 1.0
    assert clean["shots_missed"] == []
    assert clean["text"]["counts"]["matched"] == 1
    assert clean["text_missed"] == []


def test_boundaries_match_one_to_one_within_the_tolerance() -> None:
    truth = EditTruth(
        Path("x.mp4"), 10.0, ((2.0, "cut"), (2.3, "cut"), (6.0, "dissolve")), (), (8.0,)
    )
    # 2.1 is close to both cuts but counts once; 5.7 is too far from the dissolve; 8.05 is the
    # flash.
    score = score_shots(truth, [(2.1, "cut"), (5.7, "gradual"), (8.05, "cut")])
    assert (score.tally.truth, score.tally.found, score.tally.matched) == (3, 3, 1)
    assert score.missed == [(2.3, "cut"), (6.0, "dissolve")]
    assert score.false_at_flashes == 1
    assert score.by_kind["cut"].recall == 0.5
    assert score.by_kind["dissolve"].recall == 0.0
    assert score.kind_agrees == 1


def test_spans_match_by_normalised_text_and_overlapping_time() -> None:
    truth = EditTruth(
        Path("x.mp4"),
        10.0,
        (),
        (("PLATFORM 9", 1.0, 4.0), ("欢迎光临", 5.0, 8.0), ("EXIT 12", 8.0, 10.0)),
    )
    found = [
        span("platform  9", 1.5, 4.0),  # case and spaces differ: the same text
        span("欢迎光林", 5.0, 9.0),  # one of four characters misread: ratio 0.75, the caption
        span("欢送光林", 5.0, 9.0),  # two of four misread: ratio 0.5, too far
        span("EXIT I2", 8.5, 10.5),  # one of seven misread: ratio 0.86, the caption
        span("EXIT 12", 1.0, 2.0),  # the right text at the wrong time
    ]
    score = score_text(truth, found)
    assert (score.tally.truth, score.tally.found, score.tally.matched) == (3, 5, 3)
    assert score.missed == []
    assert [text for text, _, _ in score.false] == ["欢送光林", "EXIT 12"]
    assert sorted(score.start_errors) == [0.0, 0.5, 0.5]
    assert sorted(score.end_errors) == [0.0, 0.5, 1.0]


def test_a_caption_held_across_a_cut_is_one_caption() -> None:
    shots = [
        Shot(2.0, caption="SALE 50%", caption_from_s=0.5),
        Shot(2.0, caption="SALE 50%", more_captions=(Caption("EXIT 12", 1.0, where="top"),)),
        Shot(2.0, "dissolve", 1.0, caption="SALE 50%", caption_until_s=1.5),
    ]
    truth = edit_truth("held.mp4", shots, fps=25)
    # Across the dissolve it fades out and comes back: two appearances, the second cut short.
    start = round(truth.boundaries[1][0] + 0.5, 3)
    assert [(text, round(a, 3), round(b, 3)) for text, a, b in truth.captions] == [
        ("SALE 50%", 0.5, 4.0),
        ("EXIT 12", 3.0, 4.0),
        ("SALE 50%", start, start + 1.5),
    ]
