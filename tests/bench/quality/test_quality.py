"""``python -m bench.quality.pipeline --quick`` on its two short edits and its talk: the report
has its keys and sane values, the clean edit (two hard cuts, one English caption) is found
whole, and its two spoken sentences are heard with a word error rate below one half by both
models; the talk (German, then English) stays out of the English WER, its segments' languages
are scored, and the sentence it says across 30 s loses no word. The scoring is checked on its
own with made-up findings. No runtime is asserted: the numbers belong in reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.quality.pipeline import main as quality_main
from bench.quality.score import WINDOW_S, score_shots, score_speech, score_text
from bench.quality.wer import WordCounts, align_words, words_of
from core.spans import TextSpan
from core.speech import Speech, SpeechSegment, SpokenWord
from devkit.edited_videos import Caption, EditTruth, Shot, edit_truth
from devkit.speech_videos import Utterance, espeak_path

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
    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed (scripts/bootstrap.sh installs it)")
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
        "speech_words",
        "speech_substitutions",
        "speech_deletions",
        "speech_insertions",
        "speech_start_error_s",
        "speech_end_error_s",
        "speech_words_in_silence",
        "speech_model",
        "speech_wer_tiny_en",
        "speech_tiny_en",
        "speech_wer_by_language",
        "speech_language_accuracy",
        "speech_main_language_accuracy",
        "speech_languages",
        "speech_boundary_words",
        "speech_boundary_words_lost",
        "speech_boundary_words_deleted",
        "speech_boundary_words_lost_tiny_en",
        "speech_zh_recorded",
        "shots_fps_mode",
        "corpus",
        "runtime",
    ):
        assert key in report, key
    values = ratios(report)
    assert all(v is None or 0.0 <= v <= 1.0 for v in values), values
    assert None not in values[:4]
    assert report["corpus"]["videos"] == 3  # two edits and the switching talk
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
    # Fourteen words in two sentences, the second across the cut at 4.96 s: the English WER's
    # words are the clean edit's alone, not the German-then-English talk's.
    assert report["speech_model"] == "base"
    wer = report["speech_wer"]
    assert isinstance(wer, float)
    assert 0.0 <= wer < 0.5, (wer, clean["speech_errors"])
    assert report["speech_words"] == 14
    tiny_en = report["speech_tiny_en"]
    assert tiny_en["model"] == "tiny.en"
    assert tiny_en["words"] == 14
    assert report["speech_wer_tiny_en"] == tiny_en["wer"]
    assert 0.0 <= tiny_en["wer"] < 0.5, clean["speech_tiny_en"]["errors"]
    assert set(report["speech_wer_by_language"]) == {"en"}
    if (mandarin := report["speech_zh_recorded"]) is not None:  # the clip was fetched
        assert mandarin["language"] == "zh"
        assert mandarin["cer"] <= 0.2
    talk = report["edits"]["talk-de-en"]
    assert "speech_tiny_en" not in talk  # tiny.en hears English edits only
    assert talk["speech"]["words"] == 92
    # Every segment heard over a sentence is scored; the video's main language is English.
    languages = report["speech_languages"]
    assert languages["videos"] == 2
    assert languages["segments"] >= 10
    assert languages["segments"] == talk["speech_language"]["segments"] + 2
    assert set(languages["accuracy_by_language"]) == {"de", "en"}
    assert talk["speech_language"]["main_accuracy"] == 1.0
    for key in ("speech_language_accuracy", "speech_main_language_accuracy"):
        assert 0.0 <= report[key] <= 1.0, key
    assert languages["accuracy_by_language"]["en"] == 1.0
    # "Thank you for listening and have a lovely afternoon." from 28.9 s to 31.5 s: the window
    # ends in the pause before it, so no word of it is lost.
    assert report["speech_boundary_words"] == 9
    assert report["speech_boundary_words_lost"] == 0, talk["speech_boundary_lost"]
    assert report["runtime"]["compare_s"] > 0
    assert clean["speech_status"] == "done"
    assert report["edits"]["dissolve-flash"]["speech_status"] == "no_audio"
    assert report["speech"]["sentences_timed"] == {"start": 2, "end": 2}
    for key in ("speech_start_error_s", "speech_end_error_s"):
        assert 0.0 <= report[key] < 1.0, (key, report[key])


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


def words(phrase: str) -> list[str]:
    return phrase.split()


def test_word_errors_are_substitutions_deletions_and_insertions() -> None:
    said = words("please open the seminar room")
    assert align_words(said, said).counts == WordCounts(5, 0, 0, 0)
    assert align_words(said, said).counts.wer == 0.0
    substituted = align_words(said, words("please open the semi room"))
    assert substituted.counts == WordCounts(5, 1, 0, 0)
    assert substituted.steps == ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4))
    deleted = align_words(said, words("please the seminar room"))
    assert deleted.counts == WordCounts(5, 0, 1, 0)
    assert deleted.steps[1] == (1, None)
    inserted = align_words(said, words("please open the semi haroon room"))
    assert inserted.counts == WordCounts(5, 1, 0, 1)  # "semi" for "seminar", "haroon" made up
    assert inserted.counts.wer == pytest.approx(2 / 5)
    # One of each: "bat" for "cat", "on" lost, "today" made up.
    mixed = align_words(words("the cat sat on the mat"), words("the bat sat the mat today"))
    assert mixed.counts == WordCounts(6, 1, 1, 1)
    assert mixed.steps == ((0, 0), (1, 1), (2, 2), (3, None), (4, 3), (5, 4), (None, 5))
    assert mixed.counts.wer == pytest.approx(3 / 6)
    # Words made up beyond those said: more errors than words.
    assert align_words(["yes"], words("yes yes yes")).counts.wer == 2.0


def test_word_errors_with_nothing_said_or_nothing_heard() -> None:
    nothing_said = align_words([], ["hello", "there"])
    assert nothing_said.counts == WordCounts(0, 0, 0, 2)
    assert nothing_said.counts.wer is None  # no words to count errors over
    assert nothing_said.steps == ((None, 0), (None, 1))
    nothing_heard = align_words(["hello", "there"], [])
    assert nothing_heard.counts == WordCounts(2, 0, 2, 0)
    assert nothing_heard.counts.wer == 1.0
    assert align_words([], []).counts == WordCounts()
    # Corpus figures add the errors and the words: not the mean of the rates.
    total = WordCounts(10, 1, 0, 0) + WordCounts(2, 0, 2, 0)
    assert total.wer == pytest.approx(3 / 12)


def test_words_are_lowercase_without_punctuation() -> None:
    assert words_of("Mind the GAP, please!") == ["mind", "the", "gap", "please"]
    assert words_of("Don't open the semi-haroon.") == ["dont", "open", "the", "semi", "haroon"]
    assert words_of("  ") == []


def heard(*words: tuple[str, float, float]) -> Speech:
    spoken = tuple(SpokenWord(text, start, end, 0.9) for text, start, end in words)
    segment = SpeechSegment(spoken[0].start_s, spoken[-1].end_s, "", -0.2, 0.01, spoken)
    return Speech("done", (segment,), "en", 10.0)


def test_speech_is_scored_by_words_timing_and_words_in_silence() -> None:
    said = [Utterance("Good morning.", 1.0, 2.0), Utterance("Mind the gap!", 5.0, 6.5)]
    score = score_speech(
        said,
        heard(
            ("Good", 0.7, 1.2),
            ("morning.", 1.2, 2.1),
            ("uh", 3.5, 3.7),  # in the silence between the sentences
            ("Mind", 5.2, 5.5),
            ("that", 5.5, 5.8),
            ("gap.", 5.8, 6.3),
        ),
    )
    assert score.counts == WordCounts(5, 1, 0, 1)
    assert score.errors == [("", "uh"), ("the", "that")]
    assert score.start_errors == pytest.approx([-0.3, 0.2])
    assert score.end_errors == pytest.approx([0.1, -0.2])
    assert score.in_silence == [("uh", 3.5, 3.7)]
    summary = score.summary()
    assert summary["wer"] == pytest.approx(0.4)
    assert summary["start_error_s"] == pytest.approx(0.25)
    assert summary["start_bias_s"] == pytest.approx(-0.05)


def test_a_sentence_whose_first_word_was_not_heard_has_no_start_error() -> None:
    said = [Utterance("Mind the gap", 5.0, 6.5)]
    score = score_speech(said, heard(("the", 5.4, 5.6), ("gap", 5.8, 6.4)))
    assert score.counts == WordCounts(3, 0, 1, 0)
    assert score.start_errors == []
    assert score.end_errors == pytest.approx([-0.1])
    assert score.in_silence == []
    nothing = score_speech(said, None)
    assert nothing.counts == WordCounts(3, 0, 3, 0)
    assert nothing.summary()["start_error_s"] is None


def test_words_of_a_sentence_across_a_window_end_not_heard_are_lost() -> None:
    said = [
        Utterance("Good morning.", 1.0, 2.0),
        Utterance("Mind the gap and please stand back.", WINDOW_S - 1.0, WINDOW_S + 1.0),
        Utterance("Thank you.", 2 * WINDOW_S - 2.0, 2 * WINDOW_S - 1.0),  # ends before 60 s
    ]
    score = score_speech(
        said,
        heard(
            ("Good", 1.0, 1.4),
            ("morning.", 1.4, 2.0),
            ("Mind", 29.0, 29.3),
            ("the", 29.4, 29.6),
            ("cap", 29.7, 29.9),  # heard as another word: lost too
            ("and", 30.0, 30.2),  # "please" not heard at all
            ("stand", 30.3, 30.6),
            ("back.", 30.6, 31.0),
            ("Thank", 58.0, 58.4),
        ),
    )
    assert score.boundary_words == 7
    assert score.boundary_lost == [("gap", "cap"), ("please", "")]
    summary = score.summary()
    assert (summary["boundary_words"], summary["boundary_words_lost"]) == (7, 2)
    assert summary["boundary_words_deleted"] == 1
    # A sentence that only touches a window's end, or ends before it, is not across it.
    touching = score_speech([Utterance("Mind the gap", 27.0, WINDOW_S)], None)
    assert touching.boundary_words == 0
    # Every multiple of the window: 1.5 s, 30 s and 58.5 s.
    assert score_speech(said, None, window_s=1.5).boundary_words == 2 + 7 + 2
