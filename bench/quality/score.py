"""Scoring of what the pipeline found against an edit's truth, one ``score_*`` function per
aspect: shot boundaries, on-screen text spans and speech.

Found items are matched to true ones one-to-one, best pair first (``greedy_pairs``): a
boundary by time within ``TOLERANCE_S``, a text span by its text (normalised as the spans are,
``core.spans.normalise``, then alike by ``TEXT_SIMILARITY``) and an overlapping time. Speech is
scored as recognisers are, by word error rate: the words heard are aligned to the words said
with the fewest substitutions, deletions and insertions (``bench.quality.wer.align_words``),
over words lowercased and stripped of punctuation (``words_of``), and the errors counted over
the number of words said; the words of sentences said across the end of a recognition window
(``WINDOW_S``) that were not heard as said (deleted, or heard as another word: a word cut in
two comes out as a fragment) are the words lost there. Scores add up, so a
corpus's figures count every edit's items once (micro-averaged): its WER is all edits' errors
over all their words.
"""

from __future__ import annotations

import difflib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.quality.wer import WordCounts, align_words, words_of
from core.config import AsrSettings
from core.spans import SIMILARITY, TextSpan, normalise
from core.speech import Speech, SpokenWord
from devkit.edited_videos import EditTruth
from devkit.speech_videos import Utterance

TOLERANCE_S = 0.2  # a found boundary this close to a true one is that one
# The least difflib ratio of normalised texts for a span to be a caption: what core.spans
# takes for one text (a four-character caption with one character misread scores 0.75).
TEXT_SIMILARITY = SIMILARITY
KINDS = ("cut", "dissolve", "fade")
FOUND_KIND = {"cut": "cut", "dissolve": "gradual", "fade": "gradual"}
FOUND_KINDS = ("cut", "gradual")
# A word heard further than this from every sentence's voice was heard in silence. Whisper's word
# times are tokens on a 20 ms grid, and a sentence's first word starts where the VAD's 0.4 s of
# padding does.
SPEECH_TOLERANCE_S = 0.5
# A window of speech recognition ends at each multiple of this on the video's timeline (where
# its audio has no pause to end at instead): the setting's default.
WINDOW_S: float = AsrSettings.model_fields["window_s"].default


@dataclass
class Tally:
    """How many there were, how many were found, how many of those were right."""

    truth: int = 0
    found: int = 0
    matched: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            self.truth + other.truth, self.found + other.found, self.matched + other.matched
        )

    @property
    def precision(self) -> float | None:
        return self.matched / self.found if self.found else None

    @property
    def recall(self) -> float | None:
        return self.matched / self.truth if self.truth else None

    def to_json(self) -> dict[str, int]:
        return {"truth": self.truth, "found": self.found, "matched": self.matched}


@dataclass
class ShotScore:
    """Shot boundaries of one edit or, added up, of several."""

    tally: Tally
    by_kind: dict[str, Tally]  # by the true kind ("cut", "dissolve", "fade"): truth, matched
    by_found_kind: dict[str, Tally]  # by the found kind ("cut", "gradual"): found, matched
    kind_agrees: int  # matched boundaries whose found kind fits ("gradual" for both transitions)
    false_at_flashes: int  # false boundaries within TOLERANCE_S of a flash
    missed: list[tuple[float, str]]
    false: list[tuple[float, str]]

    def __add__(self, other: ShotScore) -> ShotScore:
        return ShotScore(
            self.tally + other.tally,
            {k: self.by_kind[k] + other.by_kind[k] for k in KINDS},
            {k: self.by_found_kind[k] + other.by_found_kind[k] for k in FOUND_KINDS},
            self.kind_agrees + other.kind_agrees,
            self.false_at_flashes + other.false_at_flashes,
            self.missed + other.missed,
            self.false + other.false,
        )

    def summary(self) -> dict[str, Any]:
        matched = self.tally.matched
        return {
            "precision": rounded(self.tally.precision),
            "recall": rounded(self.tally.recall),
            "recall_by_kind": {k: rounded(t.recall) for k, t in self.by_kind.items()},
            "precision_by_found_kind": {
                k: rounded(t.precision) for k, t in self.by_found_kind.items()
            },
            "counts": self.tally.to_json(),
            "counts_by_kind": {
                k: {"truth": t.truth, "matched": t.matched} for k, t in self.by_kind.items()
            },
            "counts_by_found_kind": {
                k: {"found": t.found, "matched": t.matched} for k, t in self.by_found_kind.items()
            },
            "kind_agreement": rounded(self.kind_agrees / matched) if matched else None,
            "false_at_flashes": self.false_at_flashes,
        }


@dataclass
class TextScore:
    """Text spans of one edit or, added up, of several."""

    tally: Tally
    start_errors: list[float] = field(default_factory=list)  # found - true, matched spans
    end_errors: list[float] = field(default_factory=list)
    missed: list[tuple[str, float, float]] = field(default_factory=list)
    false: list[tuple[str, float, float]] = field(default_factory=list)

    def __add__(self, other: TextScore) -> TextScore:
        return TextScore(
            self.tally + other.tally,
            self.start_errors + other.start_errors,
            self.end_errors + other.end_errors,
            self.missed + other.missed,
            self.false + other.false,
        )

    def summary(self) -> dict[str, Any]:
        """The figures; errors in seconds, ``*_bias_s`` signed (positive: found late)."""
        return {
            "precision": rounded(self.tally.precision),
            "recall": rounded(self.tally.recall),
            "counts": self.tally.to_json(),
            **time_errors(self.start_errors, self.end_errors),
        }


@dataclass
class SpeechScore:
    """Speech of one edit or, added up, of several."""

    counts: WordCounts = field(default_factory=WordCounts)
    sentences: int = 0
    # Heard - true, in seconds: the first heard word of a sentence against the start of its
    # voice, for each sentence whose first word was heard (right or as another word); the last
    # against its end likewise.
    start_errors: list[float] = field(default_factory=list)
    end_errors: list[float] = field(default_factory=list)
    in_silence: list[tuple[str, float, float]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (said, heard); "" for none
    # The words of the sentences said across a window's end, and those of them not heard as
    # said: (said, heard), heard "" where the word was deleted.
    boundary_words: int = 0
    boundary_lost: list[tuple[str, str]] = field(default_factory=list)

    def __add__(self, other: SpeechScore) -> SpeechScore:
        return SpeechScore(
            self.counts + other.counts,
            self.sentences + other.sentences,
            self.start_errors + other.start_errors,
            self.end_errors + other.end_errors,
            self.in_silence + other.in_silence,
            self.errors + other.errors,
            self.boundary_words + other.boundary_words,
            self.boundary_lost + other.boundary_lost,
        )

    def summary(self) -> dict[str, Any]:
        """The figures; times as ``TextScore``'s: errors in seconds, biases signed."""
        counts = self.counts
        return {
            "wer": rounded(counts.wer),
            "words": counts.words,
            "substitutions": counts.substitutions,
            "deletions": counts.deletions,
            "insertions": counts.insertions,
            "sentences": self.sentences,
            "sentences_timed": {"start": len(self.start_errors), "end": len(self.end_errors)},
            **time_errors(self.start_errors, self.end_errors),
            "words_in_silence": len(self.in_silence),
            "boundary_words": self.boundary_words,
            "boundary_words_lost": len(self.boundary_lost),
            "boundary_words_deleted": sum(1 for _, heard in self.boundary_lost if not heard),
        }


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def rounded_items(items: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Items as JSON lists, their floats to the millisecond."""
    return [[round(x, 3) if isinstance(x, float) else x for x in item] for item in items]


def time_errors(start_errors: Sequence[float], end_errors: Sequence[float]) -> dict[str, Any]:
    """Mean absolute errors of found start and end times, and their means with the sign
    (``*_bias_s``, positive: found late), in seconds; None where nothing was matched."""

    def mean(errors: Sequence[float], absolute: bool) -> float | None:
        if not errors:
            return None
        return round(statistics.fmean(abs(e) if absolute else e for e in errors), 3)

    return {
        "start_error_s": mean(start_errors, absolute=True),
        "end_error_s": mean(end_errors, absolute=True),
        "start_bias_s": mean(start_errors, absolute=False),
        "end_bias_s": mean(end_errors, absolute=False),
    }


def greedy_pairs(candidates: list[tuple[Any, int, int]]) -> list[tuple[int, int]]:
    """One-to-one pairs (truth index, found index), best first: ``candidates`` are
    (sort key, truth, found), the lowest key the best."""
    taken_truth: set[int] = set()
    taken_found: set[int] = set()
    pairs: list[tuple[int, int]] = []
    for _, i, j in sorted(candidates):
        if i not in taken_truth and j not in taken_found:
            taken_truth.add(i)
            taken_found.add(j)
            pairs.append((i, j))
    return pairs


def score_shots(truth: EditTruth, found: Sequence[tuple[float, str]]) -> ShotScore:
    """Found boundaries ((time, "cut" | "gradual")) against the true ones, by time alone."""
    candidates = [
        (abs(t - want), i, j)
        for i, (want, _) in enumerate(truth.boundaries)
        for j, (t, _) in enumerate(found)
        if abs(t - want) <= TOLERANCE_S
    ]
    pairs = greedy_pairs(candidates)
    by_kind = {kind: Tally() for kind in KINDS}
    by_found_kind = {kind: Tally() for kind in FOUND_KINDS}
    for _, kind in truth.boundaries:
        by_kind[kind].truth += 1
    for _, kind in found:
        by_found_kind[kind].found += 1
    for i, j in pairs:
        by_kind[truth.boundaries[i][1]].matched += 1
        by_found_kind[found[j][1]].matched += 1
    matched_truth = {i for i, _ in pairs}
    matched_found = {j for _, j in pairs}
    false = [b for j, b in enumerate(found) if j not in matched_found]
    return ShotScore(
        tally=Tally(len(truth.boundaries), len(found), len(pairs)),
        by_kind=by_kind,
        by_found_kind=by_found_kind,
        kind_agrees=sum(FOUND_KIND[truth.boundaries[i][1]] == found[j][1] for i, j in pairs),
        false_at_flashes=sum(
            any(abs(t - flash) <= TOLERANCE_S for flash in truth.flashes) for t, _ in false
        ),
        missed=[b for i, b in enumerate(truth.boundaries) if i not in matched_truth],
        false=false,
    )


def text_likeness(a: str, b: str) -> float:
    """How alike two texts read: 1.0 when their normalised forms are equal."""
    key_a, key_b = normalise(a), normalise(b)
    if key_a == key_b:
        return 1.0
    return difflib.SequenceMatcher(None, key_a, key_b, autojunk=False).ratio()


def score_text(truth: EditTruth, spans: Sequence[TextSpan]) -> TextScore:
    """Found text spans against the true captions: a span is a caption when their texts are
    alike (``TEXT_SIMILARITY``) and their times overlap; the most alike pairs first."""
    candidates = []
    for i, (text, start, end) in enumerate(truth.captions):
        for j, span in enumerate(spans):
            overlap = min(end, span.end_s) - max(start, span.start_s)
            likeness = text_likeness(text, span.text)
            if overlap > 0 and likeness >= TEXT_SIMILARITY:
                candidates.append(((-likeness, -overlap), i, j))
    pairs = greedy_pairs(candidates)
    matched_truth = {i for i, _ in pairs}
    matched_found = {j for _, j in pairs}
    return TextScore(
        tally=Tally(len(truth.captions), len(spans), len(pairs)),
        start_errors=[spans[j].start_s - truth.captions[i][1] for i, j in pairs],
        end_errors=[spans[j].end_s - truth.captions[i][2] for i, j in pairs],
        missed=[c for i, c in enumerate(truth.captions) if i not in matched_truth],
        false=[(s.text, s.start_s, s.end_s) for j, s in enumerate(spans) if j not in matched_found],
    )


def heard_words(speech: Speech | None) -> list[tuple[str, float, float]]:
    """Every word heard, as ``words_of`` gives it, with the times of the word it is part of
    (a segment without word timestamps lends its words its own start and end)."""
    if speech is None:
        return []
    heard: list[tuple[str, float, float]] = []
    for segment in speech.segments:
        timed = segment.words or (SpokenWord(segment.text, segment.start_s, segment.end_s, 0.0),)
        for word in timed:
            heard.extend((token, word.start_s, word.end_s) for token in words_of(word.text))
    return heard


def score_speech(
    utterances: Sequence[Utterance], speech: Speech | None, *, window_s: float = WINDOW_S
) -> SpeechScore:
    """What was heard (``speech``; None: nothing) against the sentences said: the words of all
    of them in order against all words heard, so that a word heard early or late is still
    matched to its sentence, and a word made up between sentences counts as an insertion. A
    sentence is said across a window's end when its voice holds a multiple of ``window_s``."""
    said: list[str] = []
    spans: list[tuple[Utterance, int, int]] = []  # a sentence, its first and last word in said
    for utterance in sorted(utterances, key=lambda u: u.start_s):
        words = words_of(utterance.text)
        if words:
            spans.append((utterance, len(said), len(said) + len(words) - 1))
        said.extend(words)
    heard = heard_words(speech)
    alignment = align_words(said, [word for word, _, _ in heard])
    taken = {a: b for a, b in alignment.steps if a is not None and b is not None}
    across = [(first, last) for u, first, last in spans if _across_window_end(u, window_s)]
    return SpeechScore(
        counts=alignment.counts,
        sentences=len(utterances),
        start_errors=[heard[taken[i]][1] - u.start_s for u, i, _ in spans if i in taken],
        end_errors=[heard[taken[i]][2] - u.end_s for u, _, i in spans if i in taken],
        in_silence=[word for word in heard if not _near_speech(word, utterances)],
        errors=[
            ("" if a is None else said[a], "" if b is None else heard[b][0])
            for a, b in alignment.steps
            if a is None or b is None or said[a] != heard[b][0]
        ],
        boundary_words=sum(last - first + 1 for first, last in across),
        boundary_lost=[
            (said[i], heard[taken[i]][0] if i in taken else "")
            for first, last in across
            for i in range(first, last + 1)
            if i not in taken or heard[taken[i]][0] != said[i]
        ],
    )


def _across_window_end(utterance: Utterance, window_s: float) -> bool:
    """Whether a window's end (a multiple of ``window_s`` after 0) lies within the voice."""
    end = math.floor(utterance.end_s / window_s) * window_s
    return end > 0 and utterance.start_s < end < utterance.end_s


def _near_speech(word: tuple[str, float, float], utterances: Sequence[Utterance]) -> bool:
    """Whether a heard word lies within ``SPEECH_TOLERANCE_S`` of a sentence's voice."""
    _, start, end = word
    return any(
        start < u.end_s + SPEECH_TOLERANCE_S and end > u.start_s - SPEECH_TOLERANCE_S
        for u in utterances
    )
