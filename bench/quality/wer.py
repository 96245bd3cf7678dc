"""Word error rate: the words of a text as a WER counts them (``words_of``), and the alignment
of the words heard to the words said with the fewest substitutions, deletions and insertions
(``align_words``), whose counts give the rate (``WordCounts.wer``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

Step = tuple[int | None, int | None]  # (said word, heard word); None: deleted, or inserted


@dataclass(frozen=True)
class WordCounts:
    """Words said, and the errors of what was heard against them."""

    words: int = 0
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0

    def __add__(self, other: WordCounts) -> WordCounts:
        return WordCounts(
            self.words + other.words,
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
        )

    @property
    def wer(self) -> float | None:
        """(S + D + I) / N: None when nothing was said; above 1 when many words were made up."""
        errors = self.substitutions + self.deletions + self.insertions
        return errors / self.words if self.words else None


@dataclass(frozen=True)
class Alignment:
    """Words heard against words said, in order: ``steps`` pairs each said word with the heard
    word it was taken for (the same word or a substitute) or with None (deleted), and gives
    each heard word not taken for one a step of its own (inserted)."""

    counts: WordCounts
    steps: tuple[Step, ...]


def words_of(text: str) -> list[str]:
    """The words of ``text`` as a WER counts them: lowercase, apostrophes dropped ("don't" is
    "dont"), any other punctuation a space ("semi-haroon" is two words)."""
    return re.sub(r"[^\w\s]", " ", re.sub(r"['’]", "", text.casefold())).split()


def align_words(said: Sequence[str], heard: Sequence[str]) -> Alignment:
    """The alignment of ``heard`` to ``said`` with the fewest substitutions, deletions and
    insertions (Levenshtein distance over words; where two are as few, a substitution is
    preferred, which keeps each heard word in the place of the word it was taken for)."""
    rows, cols = len(said) + 1, len(heard) + 1
    cost = [[i + j if i == 0 or j == 0 else 0 for j in range(cols)] for i in range(rows)]
    for i in range(1, rows):
        for j in range(1, cols):
            cost[i][j] = min(
                cost[i - 1][j - 1] + (said[i - 1] != heard[j - 1]),
                cost[i - 1][j] + 1,
                cost[i][j - 1] + 1,
            )
    steps: list[Step] = []
    i, j = len(said), len(heard)
    while i or j:
        if i and j and cost[i][j] == cost[i - 1][j - 1] + (said[i - 1] != heard[j - 1]):
            i, j = i - 1, j - 1
            steps.append((i, j))
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
            steps.append((i, None))
        else:
            j -= 1
            steps.append((None, j))
    steps.reverse()
    counts = WordCounts(
        words=len(said),
        substitutions=sum(
            1 for a, b in steps if a is not None and b is not None and said[a] != heard[b]
        ),
        deletions=sum(1 for _, b in steps if b is None),
        insertions=sum(1 for a, _ in steps if a is None),
    )
    return Alignment(counts, tuple(steps))
