"""The speech figures of the quality report, edit by edit and over the corpus.

The word error rate (``speech_wer`` and the other counts of the ``speech`` section) is over the
English edits alone, as the default model (``SPEECH_MODEL``) heard them, and beside it as
``COMPARED_MODEL`` heard the same edits (``speech_tiny_en``): tiny.en knows no other language.
The edits in one other language have their own (``speech_wer_by_language``). Words lost where a
window of recognition ends (``speech_boundary_*``) and the languages heard
(``speech_language_*``, ``bench.quality.languages``) are over every edit that speaks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import add
from typing import Any

from bench.quality.corpus import Edit
from bench.quality.languages import LanguageScore, score_languages
from bench.quality.score import SpeechScore, rounded, rounded_items, score_speech
from core.config import AsrSettings
from core.speech import Speech
from devkit.edited_videos import EditTruth

# The model the pipeline runs (the setting's default, whatever the environment says), and the
# one its English figures are compared with.
SPEECH_MODEL: str = AsrSettings.model_fields["model"].default
COMPARED_MODEL = "tiny.en"


def compared(edit: Edit) -> bool:
    """Whether ``COMPARED_MODEL`` also hears the edit: it speaks, in English alone."""
    return bool(edit.speech) and edit.english


@dataclass
class SpeechFigures:
    """The speech scores of a corpus's edits, taken one edit at a time (``add``)."""

    english: list[SpeechScore] = field(default_factory=list)
    compared: list[SpeechScore] = field(default_factory=list)
    spoken: list[SpeechScore] = field(default_factory=list)  # every edit that speaks
    by_language: dict[str, list[SpeechScore]] = field(default_factory=lambda: defaultdict(list))
    languages: list[LanguageScore] = field(default_factory=list)

    def add(
        self, edit: Edit, truth: EditTruth, speech: Speech | None, compared: Speech | None
    ) -> dict[str, Any]:
        """Score one edit's speech (``compared``: what ``COMPARED_MODEL`` heard, None where it
        did not run); its own figures, as the report lists them per edit."""
        score = score_speech(truth.utterances, speech)
        voices = edit.voices()
        language = score_languages(list(zip(truth.utterances, voices, strict=True)), speech)
        self.languages.append(language)
        if edit.english:
            self.english.append(score)
        if voices:
            self.spoken.append(score)
            if len(set(voices)) == 1:
                self.by_language[voices[0]].append(score)
        figures: dict[str, Any] = {
            "speech": score.summary(),
            "speech_status": None if speech is None else speech.status,
            "speech_heard": None if speech is None else speech.text,
            "speech_errors": score.errors,  # (said, heard), "" for no word
            "speech_in_silence": rounded_items(score.in_silence),
            "speech_boundary_lost": score.boundary_lost,  # (said, heard), "" for no word
            "speech_language": language.summary() if voices else None,
            # Each segment heard: start, end, language, its probability.
            "speech_segments": rounded_items(
                [
                    (s.start_s, s.end_s, s.language, s.language_probability)
                    for s in (speech.segments if speech is not None else ())
                ]
            ),
        }
        if compared is not None:
            other = score_speech(truth.utterances, compared)
            self.compared.append(other)
            figures["speech_tiny_en"] = {
                **other.summary(),
                "heard": compared.text,
                "errors": other.errors,
                "boundary_lost": other.boundary_lost,
            }
        return figures

    def totals(self) -> dict[str, Any]:
        """The corpus's figures (every edit's words counted once)."""
        english = _total(self.english).summary()
        tiny_en = _total(self.compared).summary()
        spoken = _total(self.spoken).summary()
        languages = reduce(add, self.languages, LanguageScore())
        return {
            "speech_model": SPEECH_MODEL,
            "speech_wer": english["wer"],
            "speech_words": english["words"],
            "speech_substitutions": english["substitutions"],
            "speech_deletions": english["deletions"],
            "speech_insertions": english["insertions"],
            "speech_start_error_s": english["start_error_s"],
            "speech_end_error_s": english["end_error_s"],
            "speech_words_in_silence": english["words_in_silence"],
            "speech": english,
            "speech_wer_tiny_en": tiny_en["wer"],
            "speech_tiny_en": {"model": COMPARED_MODEL, **tiny_en},
            "speech_wer_by_language": {
                language: _total(scores).summary()["wer"]
                for language, scores in sorted(self.by_language.items())
            },
            "speech_language_accuracy": rounded(languages.accuracy),
            "speech_main_language_accuracy": rounded(languages.main_accuracy),
            "speech_languages": languages.summary(),
            "speech_boundary_words": spoken["boundary_words"],
            "speech_boundary_words_lost": spoken["boundary_words_lost"],
            "speech_boundary_words_deleted": spoken["boundary_words_deleted"],
            "speech_boundary_words_lost_tiny_en": tiny_en["boundary_words_lost"],
        }


def _total(scores: Sequence[SpeechScore]) -> SpeechScore:
    return reduce(add, scores, SpeechScore())


def speech_lines(result: dict[str, Any]) -> list[str]:
    """The speech figures as lines of plain text."""

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    speech, tiny_en, languages = (
        result["speech"],
        result["speech_tiny_en"],
        result["speech_languages"],
    )
    by_language = ", ".join(
        f"{language} {fmt(accuracy)}"
        for language, accuracy in languages["accuracy_by_language"].items()
    )
    return [
        f"speech ({result['speech_model']}, English edits): WER {fmt(speech['wer'])} over "
        f"{speech['words']} words ({speech['substitutions']} substituted, {speech['deletions']} "
        f"deleted, {speech['insertions']} inserted); {speech['words_in_silence']} words heard "
        f"in silence",
        f"speech ({tiny_en['model']}, the same edits): WER {fmt(tiny_en['wer'])} over "
        f"{tiny_en['words']} words; {tiny_en['words_in_silence']} words heard in silence",
        "speech WER by language (edits in one language): "
        + ", ".join(f"{k} {fmt(v)}" for k, v in result["speech_wer_by_language"].items()),
        f"speech language: {fmt(result['speech_language_accuracy'])} of "
        f"{languages['segments']} segments right ({by_language}; "
        f"{languages['segments_unmatched']} over no sentence), main language right in "
        f"{languages['videos_right']}/{languages['videos']} videos",
        f"speech across window ends: {result['speech_boundary_words_lost']} of "
        f"{result['speech_boundary_words']} words not heard as said, "
        f"{result['speech_boundary_words_deleted']} of them deleted ({tiny_en['model']}, "
        f"English edits: {result['speech_boundary_words_lost_tiny_en']} of "
        f"{tiny_en['boundary_words']})",
    ]
