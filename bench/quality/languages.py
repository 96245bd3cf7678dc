"""The language of what was heard against the language of what was said.

Each speech segment carries the language it was decoded in (``SpeechSegment.language``); it is
right when it is the language of the sentence whose voice it overlaps most. A segment that
overlaps no sentence (words made up in silence) has no language to be right in: it is counted
apart. A video's main language (``Speech.language``) is right when it is the language most of
its sentences' voice is in. Scores add up, as ``bench.quality.score``'s do.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.quality.score import rounded
from bench.quality.wer import align_words
from core.speech import Speech, SpeechSegment
from devkit.recorded_speech import MANDARIN_TEXT, MANDARIN_TEXT_TRADITIONAL, mandarin_clip
from devkit.speech_videos import Utterance, read_audio
from models.asr import AsrEngine
from stages.audio import SAMPLE_RATE

Said = tuple[Utterance, str]  # a sentence and its language (ISO 639-1)


@dataclass
class LanguageScore:
    """The languages of the segments and videos of one edit or, added up, of several."""

    # (said, heard) for each segment that overlaps a sentence; heard is None where the segment
    # does not say (stored before segments carried it).
    segments: list[tuple[str, str | None]] = field(default_factory=list)
    unmatched: int = 0  # segments that overlap no sentence
    videos: list[tuple[str, str | None]] = field(default_factory=list)  # (said, heard)

    def __add__(self, other: LanguageScore) -> LanguageScore:
        return LanguageScore(
            self.segments + other.segments,
            self.unmatched + other.unmatched,
            self.videos + other.videos,
        )

    @property
    def accuracy(self) -> float | None:
        """The share of segments heard in the language said; None without any."""
        return _share(self.segments)

    @property
    def main_accuracy(self) -> float | None:
        """The share of videos whose main language is the one most of their speech is in."""
        return _share(self.videos)

    def summary(self) -> dict[str, Any]:
        by_language: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
        for pair in self.segments:
            by_language[pair[0]].append(pair)
        return {
            "accuracy": rounded(self.accuracy),
            "main_accuracy": rounded(self.main_accuracy),
            "segments": len(self.segments),
            "segments_right": sum(said == heard for said, heard in self.segments),
            "segments_unmatched": self.unmatched,
            "videos": len(self.videos),
            "videos_right": sum(said == heard for said, heard in self.videos),
            "accuracy_by_language": {
                language: rounded(_share(pairs)) for language, pairs in sorted(by_language.items())
            },
            # Segments heard in another language than said: [said, heard, how many].
            "confused": [
                [said, heard, count]
                for (said, heard), count in sorted(
                    Counter(p for p in self.segments if p[0] != p[1]).items(), key=str
                )
            ],
        }


def _share(pairs: Sequence[tuple[str, str | None]]) -> float | None:
    return sum(said == heard for said, heard in pairs) / len(pairs) if pairs else None


def main_language(said: Sequence[Said]) -> str | None:
    """The language most of the sentences' voice is in; None without sentences."""
    voiced: dict[str, float] = defaultdict(float)
    for utterance, language in said:
        voiced[language] += utterance.end_s - utterance.start_s
    return max(voiced, key=voiced.__getitem__) if voiced else None


def _overlapped(segment: SpeechSegment, said: Sequence[Said]) -> str | None:
    """The language of the sentence whose voice ``segment`` overlaps most; None: none."""
    best, language = 0.0, None
    for utterance, spoken in said:
        overlap = min(segment.end_s, utterance.end_s) - max(segment.start_s, utterance.start_s)
        if overlap > best:
            best, language = overlap, spoken
    return language


def score_languages(said: Sequence[Said], speech: Speech | None) -> LanguageScore:
    """The languages ``speech`` was heard in against those the sentences were said in; an edit
    without sentences scores nothing (its language is not known)."""
    if not said:
        return LanguageScore()
    heard = None if speech is None else speech.language
    score = LanguageScore(videos=[(main_language(said) or "", heard)])
    for segment in speech.segments if speech is not None else ():
        language = _overlapped(segment, said)
        if language is None:
            score.unmatched += 1
        else:
            score.segments.append((language, segment.language))
    return score


def mandarin_errors(heard: str) -> float:
    """The character error rate of ``heard`` against the recorded sentence, in the script it
    was written in (Whisper writes Mandarin in traditional or simplified characters)."""
    characters = [ch for ch in heard if ch.isalnum()]
    return min(
        align_words(list(text), characters).counts.wer or 0.0
        for text in (MANDARIN_TEXT, MANDARIN_TEXT_TRADITIONAL)
    )


def mandarin_cer() -> dict[str, Any] | None:
    """Whisper base on a recorded Mandarin sentence (``devkit.recorded_speech``): the language
    it hears, and the character error rate against the sentence in the script it wrote (it
    writes Mandarin in traditional or simplified characters); None where the clip was not
    fetched."""
    clip = mandarin_clip()
    if clip is None:
        return None
    engine = AsrEngine(model="base")
    engine.load()
    try:
        heard = engine.transcribe(read_audio(clip, SAMPLE_RATE)[0])
    finally:
        engine.close()
    return {
        "language": heard.language,
        "language_probability": rounded(heard.language_probability),
        "cer": rounded(mandarin_errors(heard.text)),
        "characters": len(MANDARIN_TEXT),
        "heard": heard.text,
    }
