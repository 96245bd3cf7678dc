"""``bench.perf.stage_cost``'s review figures, small: the qr reader finds the code in every
frame that has one and none elsewhere, and the review stage's result of a talking video holds
contact details, a QR code and terms for it to find. No speed is asserted: the numbers belong
in reports."""

from __future__ import annotations

from pathlib import Path

from bench.perf.stage_cost import qr_cost, review_cost, review_line


def test_qr_and_review_costs_on_a_few_frames_and_a_minute_of_video(tmp_path: Path) -> None:
    report = {"qr": qr_cost(frames=2, reads=1), "review": review_cost(tmp_path, 60, runs=1)}
    qr = report["qr"]
    assert isinstance(qr, dict)
    assert qr["with_code"]["codes_found"] == 2
    assert qr["without_code"]["codes_found"] == 0
    assert qr["with_code"]["cpu_ms_per_frame"] > 0
    review = report["review"]
    assert isinstance(review, dict)
    assert review["samples"] == 60
    assert review["ocr_lines"] == 180
    assert review["speech_segments"] == 17
    assert 0 < review["text_spans"] <= review["ocr_lines"]
    assert all(review["findings"][name] > 0 for name in ("contact", "qr", "terms"))
    assert review["cpu_ms_per_video"] > 0
    assert "without a code" in review_line(report)
