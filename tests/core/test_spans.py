"""On-screen text spans from the OCR lines of sampled frames."""

from __future__ import annotations

import random

import pytest

from core.records import Frame, OcrLine
from core.spans import TextSpan, normalise, text_spans


def line(text: str, x: float = 100, y: float = 50, score: float = 0.9) -> OcrLine:
    """A 200 x 30 px line whose top-left corner is at (x, y)."""
    return OcrLine(text, score, ((x, y), (x + 200, y), (x + 200, y + 30), (x, y + 30)))


def samples(*readings: list[OcrLine], step_s: float = 0.5) -> list[Frame]:
    """One frame per entry, ``step_s`` apart, each with the lines given."""
    return [
        Frame(index=i, timestamp_s=i * step_s, image=None, ocr_lines=lines)
        for i, lines in enumerate(readings)
    ]


def test_jittered_readings_are_one_span_with_the_majority_text() -> None:
    frames = samples(
        [line("SERVER ROOM B7", score=0.9)],
        [line("SERVER R0OM B7", x=102, y=51, score=0.6)],
        [line("SERVER ROOM B7", x=99, score=0.95)],
        [],
    )
    [span] = text_spans(frames)
    assert span.text == "SERVER ROOM B7"
    assert (span.start_s, span.end_s) == (0.0, 1.5)  # until the sample after the last reading
    assert span.frames == 3
    assert span.score == pytest.approx((0.9 + 0.6 + 0.95) / 3)
    assert span.box == ((100, 50), (300, 50), (300, 80), (100, 80))  # the median bounds


def test_a_missing_reading_does_not_split_its_span() -> None:
    shown = [line("Breaking News")]
    [span] = text_spans(samples(shown, shown, [], shown, shown, []))
    assert (span.start_s, span.end_s, span.frames) == (0.0, 2.5, 4)


def test_a_gap_longer_than_max_gap_splits() -> None:
    shown = [line("Breaking News")]
    frames = samples(shown, [], [], shown)
    assert [(s.start_s, s.end_s) for s in text_spans(frames)] == [(0.0, 0.5), (1.5, 2.0)]
    assert len(text_spans(frames, max_gap=2)) == 1
    assert len(text_spans(samples(shown, [], shown), max_gap=0)) == 2


def test_two_texts_at_once_are_two_spans_ordered_from_the_top() -> None:
    both = [line("SALE 50%", x=600, y=400), line("EXIT", x=20, y=10)]
    spans = text_spans(samples(both, both, [both[1]]))
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [
        ("EXIT", 0.0, 1.5),
        ("SALE 50%", 0.0, 1.0),
    ]


@pytest.mark.parametrize(
    ("before", "after"),
    [("OPEN", "CLOSED"), ("Step 2: knead the dough", "Step 3: let it rise"), ("12:01", "12:02")],
)
def test_text_that_changes_in_place_is_two_adjacent_spans(before: str, after: str) -> None:
    frames = samples([line(before)], [line(before)], [line(after)], [line(after)])
    first, second = text_spans(frames)
    assert (first.text, first.start_s, first.end_s) == (before, 0.0, 1.0)
    assert (second.text, second.start_s, second.end_s) == (after, 1.0, 2.0)


def test_a_changed_digit_is_new_text_but_a_letter_read_as_a_digit_is_not() -> None:
    score = samples([line("SCORE 1-0")], [line("SCORE 2-0")])
    assert [s.text for s in text_spans(score)] == ["SCORE 1-0", "SCORE 2-0"]
    misread = samples([line("ROOM 204")], [line("R0OM 204")], [line("ROOM 204")])
    assert [s.text for s in text_spans(misread)] == ["ROOM 204"]


def test_chinese_with_one_character_misread_merges() -> None:
    frames = samples(
        [line("欢迎光临")], [line("欢迎光林", x=101)], [line("欢迎 光临")], [line("欢迎光临")]
    )
    [span] = text_spans(frames)
    assert (span.text, span.start_s, span.end_s, span.frames) == ("欢迎光临", 0.0, 2.0, 4)


def test_similar_text_elsewhere_on_screen_is_another_span() -> None:
    frames = samples([line("Meeting Room A", y=10)], [line("Meeting Room A", y=600)])
    assert len(text_spans(frames)) == 2
    # The same text moving by less than its own size (a scroll) stays one span.
    moving = samples(*([line("Thanks for watching", y=500 - 25 * i)] for i in range(5)))
    assert len(text_spans(moving)) == 1


def test_the_last_sample_ends_one_median_interval_later() -> None:
    frames = [
        Frame(index=i, timestamp_s=t, image=None, ocr_lines=[line("LIVE")])
        for i, t in enumerate([0.0, 1.0, 2.0, 4.0])
    ]
    [span] = text_spans(frames)
    assert (span.start_s, span.end_s) == (0.0, 5.0)
    [single] = text_spans(frames[:1])
    assert (single.start_s, single.end_s) == (0.0, 0.0)


def test_ties_go_to_the_higher_score_and_one_stray_box_does_not_widen_the_span() -> None:
    frames = samples(
        [line("EXlT 12", score=0.5)],
        [line("EXIT 12", score=0.8)],
        [line("EXIT 12", x=110, score=0.8)],  # still overlapping: IoU 0.9
        [line("EXlT 12", score=0.9)],
    )
    [span] = text_spans(frames)
    assert span.text == "EXlT 12"  # two readings each; the best single score decides
    assert span.box[0] == (100, 50)


def test_empty_videos_and_frames_without_text_have_no_spans() -> None:
    assert text_spans([]) == []
    assert text_spans(samples([], [], [line("   ")])) == []


def test_the_order_of_the_frames_given_does_not_matter() -> None:
    frames = samples(
        [line("A caption", y=600), line("TITLE")],
        [line("A caption", y=600)],
        [line("A captlon", y=600), line("OTHER", y=300)],
    )
    shuffled = frames[:]
    random.Random(3).shuffle(shuffled)
    assert text_spans(shuffled) == text_spans(frames)
    assert [s.text for s in text_spans(frames)] == ["TITLE", "A caption", "OTHER"]


def test_json_round_trip() -> None:
    [span] = text_spans(samples([line("欢迎光临")], [line("欢迎光临")]))
    assert TextSpan.from_json(span.to_json()) == span
    assert span.to_json()["box"][2] == [300.0, 80.0]


def test_normalise() -> None:
    assert normalise("  Server\tROOM  b7 ") == "server room b7"
    assert normalise("欢迎 光临") == "欢迎光临"
    assert normalise("ＥＸＩＴ") == "exit"  # full-width forms, as CJK OCR often returns them


def test_stray_readings_of_texture_are_dropped_and_real_short_signs_kept() -> None:
    frames = samples(
        [line("W", x=400), line("_", x=10, y=300)],
        [line("二", x=600, y=200), line("5", x=10, y=10)],
        [line("5", x=10, y=10), line("--", x=300, y=300)],
        [line("OK", x=200, y=100)],
    )
    kept = [(span.text, span.frames) for span in text_spans(frames)]
    # Single characters read once and readings without a letter or digit are noise; a
    # one-character sign read twice and a two-character one read once are text.
    assert kept == [("5", 2), ("OK", 1)]
