"""The speech figures of ``bench.quality`` beyond the word error rate: the language of each
segment and video against the sentences' (``bench.quality.languages``), the report's split of
English and other edits (``bench.quality.speech_report``), and the talks' layout
(``bench.quality.talks``): the sentences meant to be said across a window's end are, with the
pauses between voices the talk says."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from bench.quality.corpus import Edit
from bench.quality.languages import score_languages
from bench.quality.score import WINDOW_S
from bench.quality.speech_report import COMPARED_MODEL, SPEECH_MODEL, SpeechFigures, compared
from bench.quality.talks import talks
from core.speech import Speech, SpeechSegment, SpokenWord, main_language
from devkit.edited_videos import EditTruth, Shot
from devkit.speech_videos import Utterance, espeak_path, synthesize, voiced_span


def segment(text: str, start_s: float, end_s: float, language: str | None) -> SpeechSegment:
    words = text.split()
    step = (end_s - start_s) / len(words)
    timed = tuple(
        SpokenWord(word, start_s + i * step, start_s + (i + 1) * step, 0.9)
        for i, word in enumerate(words)
    )
    return SpeechSegment(start_s, end_s, text, -0.2, 0.01, timed, language, 0.9)


def speech(*segments: SpeechSegment) -> Speech:
    return Speech("done", segments, main_language(segments), 40.0)


def test_a_segment_takes_the_language_of_the_sentence_it_overlaps_most() -> None:
    said = [
        (Utterance("Guten Morgen.", 0.5, 2.5), "de"),
        (Utterance("Good morning to you all.", 4.0, 7.0), "en"),
    ]
    score = score_languages(
        said,
        speech(
            segment("Guten Morgen.", 0.4, 2.5, "de"),
            # Over both, most over the English one: heard in German, so wrong.
            segment("Morgen good morning to", 2.0, 6.0, "de"),
            segment("you all.", 6.0, 7.0, "en"),
            segment("thanks", 10.0, 10.5, "en"),  # over no sentence
        ),
    )
    assert score.segments == [("de", "de"), ("en", "de"), ("en", "en")]
    assert score.unmatched == 1
    assert score.accuracy == pytest.approx(2 / 3)
    # Most of the voice is English (3 s against 2 s), most of what was heard German.
    assert score.videos == [("en", "de")]
    assert score.main_accuracy == 0.0
    summary = score.summary()
    assert summary["accuracy_by_language"] == {"de": 1.0, "en": 0.5}
    assert summary["confused"] == [["en", "de", 1]]
    assert (summary["segments"], summary["segments_right"], summary["segments_unmatched"]) == (
        3,
        2,
        1,
    )


def test_languages_are_not_scored_without_sentences_and_nothing_heard_is_wrong() -> None:
    assert score_languages([], speech(segment("hello", 0.0, 1.0, "en"))).summary()["videos"] == 0
    nothing = score_languages([(Utterance("Hola.", 0.5, 1.5), "es")], None)
    assert nothing.segments == []
    assert nothing.accuracy is None
    assert nothing.videos == [("es", None)]
    assert nothing.main_accuracy == 0.0


def edit(name: str, speech: tuple[tuple[float, str], ...], languages: tuple[str, ...] = ()) -> Edit:
    return Edit(name, name, (Shot(40.0),), speech, languages)


def truth(of: Edit) -> EditTruth:
    said = tuple(Utterance(text, start, start + 2.0) for start, text in of.speech)
    return EditTruth(Path(f"{of.name}.mp4"), 40.0, (), (), (), said)


def test_only_english_edits_enter_the_english_word_error_rate() -> None:
    english = edit("english", ((1.0, "mind the gap"), (WINDOW_S - 1.0, "thank you all")))
    german = edit("german", ((1.0, "guten morgen"),), ("de",))
    mixed = edit("mixed", ((1.0, "guten morgen"), (5.0, "good morning")), ("de", "en"))
    silent = edit("silent", ())
    assert [compared(e) for e in (english, german, mixed, silent)] == [True, False, False, False]
    figures = SpeechFigures()
    heard = {
        "english": speech(
            segment("mind the gap", 1.0, 3.0, "en"), segment("thank", 29.0, 30.0, "en")
        ),
        "german": speech(segment("guten morgen", 1.0, 3.0, "de")),
        "mixed": speech(
            segment("good morgen", 1.0, 3.0, "en"), segment("good morning", 5.0, 7.0, "en")
        ),
        "silent": None,
    }
    per_edit = {
        e.name: figures.add(e, truth(e), heard[e.name], heard[e.name] if compared(e) else None)
        for e in (english, german, mixed, silent)
    }
    totals = figures.totals()
    assert totals["speech_model"] == SPEECH_MODEL == "base"
    assert totals["speech_tiny_en"]["model"] == COMPARED_MODEL
    assert totals["speech_words"] == 6  # the English edit's alone
    assert totals["speech_wer"] == pytest.approx(2 / 6, abs=1e-4)  # "you all" not heard
    assert totals["speech_wer_tiny_en"] == totals["speech_wer"]  # the same speech given
    assert totals["speech_wer_by_language"] == {"de": 0.0, "en": pytest.approx(2 / 6, abs=1e-4)}
    # Boundary words over every edit that speaks: "thank you all" is said across 30 s.
    assert (totals["speech_boundary_words"], totals["speech_boundary_words_lost"]) == (3, 2)
    assert totals["speech_boundary_words_deleted"] == 2
    assert per_edit["english"]["speech_boundary_lost"] == [("you", ""), ("all", "")]
    # Segments: 2 English + 1 German + 2 in the mixed edit, one of them wrong.
    assert totals["speech_language_accuracy"] == pytest.approx(4 / 5, abs=1e-4)
    assert totals["speech_main_language_accuracy"] == pytest.approx(
        2 / 3, abs=1e-4
    )  # mixed: "de" said
    assert per_edit["silent"]["speech_language"] is None
    assert "speech_tiny_en" in per_edit["english"]
    assert "speech_tiny_en" not in per_edit["german"]


def test_an_edit_has_one_language_per_sentence_or_none() -> None:
    with pytest.raises(ValueError, match="one language per sentence"):
        edit("wrong", ((1.0, "hola"), (3.0, "hello")), ("es",))
    assert edit("english", ((1.0, "hello"),)).voices() == ("en",)


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng is not installed")
def test_the_talks_say_sentences_across_window_ends_with_the_pauses_they_claim(
    tmp_path: Path,
) -> None:
    across: dict[str, list[int]] = {}
    for talk in talks(quick=False):
        voices = []
        for i, ((start, text), language) in enumerate(zip(talk.speech, talk.voices(), strict=True)):
            first, last = voiced_span(synthesize(text, tmp_path / f"{talk.name}-{i}.wav", language))
            voices.append((start + first, start + last))
        assert talk.shots[0].seconds > voices[-1][1] + 0.5, talk.name
        pauses = [b[0] - a[1] for a, b in pairwise(voices)]
        assert min(pauses) > 0.3, (talk.name, pauses)
        across[talk.name] = [
            k
            for k in (1, 2)
            for start, end in voices
            # Held with 0.7 s of voice on either side: the window's end is mid-sentence.
            if start + 0.7 < k * WINDOW_S < end - 0.7
        ]
        if talk.name == "talk-windows":
            assert pauses == pytest.approx([0.6] * len(pauses), abs=0.05)
        if talk.name == "talk-tight":
            assert max(pauses) < 0.4, pauses
        if len(set(talk.voices())) > 1:
            switch = talk.voices().index("en") - 1
            assert pauses[switch] == pytest.approx(1.5, abs=0.05)
            assert max(p for i, p in enumerate(pauses) if i != switch) < 0.7
    assert across == {
        "talk-windows": [1, 2],
        "talk-tight": [1],
        "talk-de": [],
        "talk-es": [],
        "talk-es-en": [],
        "talk-de-en": [1],
    }
    assert [t.name for t in talks(quick=True)] == ["talk-de-en"]
