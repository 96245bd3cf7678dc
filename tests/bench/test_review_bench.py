"""``python -m bench.review --quick``: eight short videos (a phone number and a WeChat id on
screen, a phone number said, a QR code holding a link and one holding plain text, a term in
traditional script, a price, clean speech) through the real stages (decode, OCR, the qr stage,
speech recognition, the review stage). Contact details and QR codes are flagged where they
are and nowhere else; the scoring is checked on its own. No runtime is asserted: the numbers
belong in reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.review import flagged, main, recall_by_place, score
from bench.review_cases import ALL, PLACES, cases
from devkit.speech_videos import espeak_path


def test_scoring_counts_each_video_once_per_category() -> None:
    rows = [
        (frozenset({"contact"}), frozenset({"contact"})),
        (frozenset({"contact", "qr"}), frozenset({"qr"})),
        (frozenset(), frozenset({"contact"})),
        (frozenset({"terms"}), frozenset({"terms"})),
        (frozenset(), frozenset()),
    ]
    scored = score(rows)
    assert scored["contact"] == {"precision": 0.5, "recall": 0.5, "tp": 1, "fp": 1, "fn": 1}
    assert scored["qr"] == {"precision": 1.0, "recall": 1.0, "tp": 1, "fp": 0, "fn": 0}
    assert scored["terms"] == {"precision": 1.0, "recall": 1.0, "tp": 1, "fp": 0, "fn": 0}
    # Nothing flagged and nothing to find: no ratio, rather than a made-up one.
    assert score([(frozenset(), frozenset())])["qr"] == {
        "precision": None,
        "recall": None,
        "tp": 0,
        "fp": 0,
        "fn": 0,
    }


def test_contact_recall_is_split_by_where_the_contact_was() -> None:
    by_place = recall_by_place(
        [("screen", True), ("screen", False), ("qr", True), (None, True), ("screen", True)]
    )
    assert by_place["screen"] == {"recall": 0.667, "found": 2, "cases": 3}
    assert by_place["qr"] == {"recall": 1.0, "found": 1, "cases": 1}
    assert by_place["speech"] == {"recall": None, "found": 0, "cases": 0}


def test_a_category_is_flagged_unless_it_passes() -> None:
    review = {
        "categories": {
            "contact": {"decision": "block"},
            "qr": {"decision": "review"},
            "terms": {"decision": "pass"},
            "visual": {"decision": "block"},  # not scored: no VLM runs
        }
    }
    assert flagged(review) == frozenset({"contact", "qr"})


def test_the_cases_are_short_and_say_where_their_contact_is() -> None:
    assert len({case.name for case in ALL}) == len(ALL)
    assert 35 <= len(ALL) <= 45
    for case in ALL:
        seconds = sum(scene.seconds for scene in case.scenes)
        assert 3.0 <= seconds <= 6.0, case.name
        assert ("contact" in case.flags) == (case.place is not None), case.name
        assert case.place is None or case.place in PLACES
        assert ("qr" in case.flags) == any(scene.qr for scene in case.scenes), case.name
    quick = cases(quick=True)
    assert len(quick) == 8
    assert {case.place for case in quick} >= set(PLACES)
    assert any(not case.flags for case in quick)


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng is not installed")
def test_quick_run_flags_contact_details_and_qr_codes(tmp_path: Path) -> None:
    out = tmp_path / "review.json"
    assert main(["--quick", "--workdir", str(tmp_path / "work"), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["categories"]) == {"contact", "qr", "terms"}
    for figures in report["categories"].values():
        assert set(figures) == {"precision", "recall", "tp", "fp", "fn"}
    for category in ("contact", "qr"):
        assert report["categories"][category]["precision"] >= 0.9, report["wrong"]
        assert report["categories"][category]["recall"] >= 0.9, report["wrong"]
    assert set(report["contact_recall_by_place"]) == {"screen", "speech", "qr"}
    assert report["asr_model"] == "base"  # whatever the tests' environment names
    assert len(report["cases"]) == report["videos"] == 8
    said = next(case for case in report["cases"] if case["case"] == "said-mobile")
    assert said["heard"]
    assert said["evidence"]["contact"][0]["source"] == "speech"
    coded = next(case for case in report["cases"] if case["case"] == "qr-url")
    assert coded["qr_read"] == ["https://example.com/join"]
    assert {"pipeline_s", "review_ms_per_video", "qr_ms_per_analysed_sample"} <= set(
        report["runtime"]
    )
