"""Text rules of the review stage (内容审核): the operator's term lists and contact details, in
on-screen text (OCR lines), speech transcripts and VLM descriptions.

Terms match on normalised text (``normalise``): full-width as half-width (NFKC), case folded,
traditional Chinese as simplified, and what stands between characters to split a word left out
(``赌 博``, ``赌*博``, ``赌。博``, ``v.i.a.g.r.a``). Latin terms match whole words only (``ass``
is not in ``class``); CJK terms match anywhere. Contact details are found by
``stages.review_contacts`` (``find_contacts``, re-exported here with ``TextHit``).

Out of scope: pinyin and homophones (``dubo``, ``堵搏`` for ``赌博``), look-alike letters and
digits (``v1agra``), and words split into longer pieces (``via gra``).

Traditional to simplified, one character for one, comes from OpenCC's ``TSCharacters`` table
(Apache-2.0) as the ``opencc-python-reimplemented`` wheel ships it (Apache-2.0 licence file and
OpenCC notice inside the wheel).
"""

from __future__ import annotations

import logging
import re
import time
import unicodedata
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

from stages.review_contacts import CJK, TextHit, find_contacts

__all__ = ["TermLists", "TextHit", "find_contacts", "normalise"]

log = logging.getLogger(__name__)

_CJK_CHAR = re.compile(f"[{CJK}]")
_LATIN_WORD_CHAR = re.compile(rf"[^\W{CJK}]")  # a word character outside the CJK scripts
_CLAUSE_MARKS = frozenset("。！？!?，,；;：:、\n")
_MAX_SPLIT_GAP = 3  # at most this many characters between the letters of a split word
_COMMENT = re.compile(r"(?:^|\s)#.*")


@cache
def _simplified() -> dict[int, str]:
    """Traditional character -> simplified one, from the table the package ships."""
    table = files("opencc").joinpath("dictionary", "TSCharacters.txt").read_text("utf-8")
    mapping: dict[int, str] = {}
    for line in table.splitlines():
        traditional, _, simplified = line.partition("\t")
        choices = simplified.split()
        # One for one, so that offsets survive: the table's first choice, where it is one.
        if len(traditional) == 1 and choices and len(choices[0]) == 1:
            mapping[ord(traditional)] = choices[0]
    return mapping


def _is_gap(ch: str) -> bool:
    """Spacing, punctuation, symbols (emoji too) and control characters."""
    return unicodedata.category(ch)[0] in "ZPSC"


def _is_single_letter(chars: list[str], start: int, end: int) -> bool:
    return end - start == 1 and chars[start].isalpha() and not _CJK_CHAR.match(chars[start])


def normalise(text: str) -> tuple[str, list[int]]:
    """``text`` as terms are matched in it, and for each of its characters the index in
    ``text`` it came from.

    Full-width forms become half-width (NFKC), case is folded, traditional Chinese becomes
    simplified, zero-width characters go; what stands between two CJK characters goes, and so
    do the marks between the letters of a word spelt out one letter at a time (``v.i.a.g.r.a``,
    three letters or more); other spacing becomes one space."""
    chars: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        if unicodedata.category(ch) == "Cf":
            continue
        for folded in unicodedata.normalize("NFKC", ch).casefold():
            chars.append(folded)
            index.append(i)
    chars = list("".join(chars).translate(_simplified()))

    runs: list[tuple[int, int]] = []  # alternating runs of gap and non-gap characters
    for i in range(len(chars)):
        if i and _is_gap(chars[i]) == _is_gap(chars[i - 1]):
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    dropped = {
        k
        for k in range(1, len(runs) - 1)
        if _is_gap(chars[runs[k][0]])
        and _CJK_CHAR.match(chars[runs[k][0] - 1])
        and _CJK_CHAR.match(chars[runs[k][1]])
    }
    dropped |= _split_word_gaps(chars, runs)

    out: list[str] = []
    out_index: list[int] = []
    for k, (start, end) in enumerate(runs):
        if k in dropped:
            continue
        if all(ch.isspace() for ch in chars[start:end]):
            out.append(" ")
            out_index.append(index[start])
        else:
            out.extend(chars[start:end])
            out_index.extend(index[start:end])
    return "".join(out), out_index


def _split_word_gaps(chars: list[str], runs: list[tuple[int, int]]) -> set[int]:
    """The gap runs inside words spelt one letter at a time: three letters or more, each gap
    short and on one line."""
    links = [
        k
        for k in range(1, len(runs) - 1)
        if _is_gap(chars[runs[k][0]])
        and runs[k][1] - runs[k][0] <= _MAX_SPLIT_GAP
        and "\n" not in chars[runs[k][0] : runs[k][1]]
        and _is_single_letter(chars, *runs[k - 1])
        and _is_single_letter(chars, *runs[k + 1])
    ]
    chains: list[list[int]] = []
    for k in links:
        if chains and chains[-1][-1] == k - 2:
            chains[-1].append(k)
        else:
            chains.append([k])
    return {k for chain in chains if len(chain) >= 2 for k in chain}


class _Automaton:
    """Aho-Corasick over the normalised terms: every occurrence of every term in one pass."""

    def __init__(self, terms: list[str]) -> None:
        self._goto: list[dict[str, int]] = [{}]
        self._found: list[list[int]] = [[]]  # per state: the terms (by number) ending there
        for number, term in enumerate(terms):
            state = 0
            for ch in term:
                if ch not in self._goto[state]:
                    self._goto[state][ch] = len(self._goto)
                    self._goto.append({})
                    self._found.append([])
                state = self._goto[state][ch]
            self._found[state].append(number)
        self._fail = [0] * len(self._goto)
        queue = deque(self._goto[0].values())
        while queue:
            state = queue.popleft()
            for ch, child in self._goto[state].items():
                queue.append(child)
                fallback = self._fail[state]
                while fallback and ch not in self._goto[fallback]:
                    fallback = self._fail[fallback]
                self._fail[child] = self._goto[fallback].get(ch, 0)
                self._found[child] = self._found[child] + self._found[self._fail[child]]

    def matches(self, text: str) -> Iterator[tuple[int, int]]:
        """``(end, term number)`` of every occurrence."""
        state = 0
        for i, ch in enumerate(text):
            while state and ch not in self._goto[state]:
                state = self._fail[state]
            state = self._goto[state].get(ch, 0)
            for number in self._found[state]:
                yield i + 1, number


def _whole_word(text: str, start: int, end: int) -> bool:
    """A Latin term's ends must not touch another Latin letter or digit; CJK ends may."""

    def latin(i: int) -> bool:
        return 0 <= i < len(text) and bool(_LATIN_WORD_CHAR.match(text[i]))

    return not (latin(start) and latin(start - 1)) and not (latin(end - 1) and latin(end))


def _term_confidence(text: str, normalised: str, index: list[int], start: int, end: int) -> float:
    """1.0 where the term is written whole; 0.9 where it was split to evade (``赌 博``,
    ``v.i.a.g.r.a``); 0.7 where one clause mark splits it, which may just end a sentence
    before the next word (``不赌。博物馆``)."""
    gaps = []
    for k in range(start, end - 1):
        between = text[index[k] + 1 : index[k + 1]]
        collapsed = " " in (normalised[k], normalised[k + 1]) and not between.strip()
        if between and not collapsed:
            gaps.append(between)
    if not gaps:
        return 1.0
    if len(gaps) == 1 and _CLAUSE_MARKS.intersection(gaps[0]):
        return 0.7
    return 0.9


@dataclass(frozen=True)
class _ListFile:
    stamp: tuple[int, int]  # mtime (ns) and size when read
    terms: dict[str, str]  # normalised term -> the term as the list writes it


def _read_terms(path: Path) -> dict[str, str]:
    terms: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        written = _COMMENT.sub("", line).strip()
        normalised = normalise(written)[0].strip()
        if any(ch.isalnum() for ch in normalised):
            terms.setdefault(normalised, written)
    return terms


class TermLists:
    """The operator's term lists: a folder of ``<list>.txt`` files, UTF-8, one term a line,
    ``#`` starting a comment (at the start of a line, or after a space), blank lines ignored.

    Files added, changed (by mtime and size) or removed are read again at most once every
    ``check_every_s``, on the next ``find``; a file that cannot be read keeps the terms it had.
    """

    def __init__(self, folder: Path | None, *, check_every_s: float = 5.0) -> None:
        self._folder = folder
        self._check_every_s = check_every_s
        self._checked_at: float | None = None
        self._files: dict[str, _ListFile] = {}
        self._terms: list[tuple[str, str, str]] = []  # (normalised, list, written)
        self._automaton = _Automaton([])
        if folder is not None and not folder.is_dir():
            log.warning("term lists folder %s is not there: no terms until it is", folder)
        self._refresh()

    @property
    def lists(self) -> dict[str, int]:
        """List name -> number of terms."""
        return {name: len(listed.terms) for name, listed in sorted(self._files.items())}

    def find(self, text: str) -> list[TextHit]:
        """Every listed term in ``text``, in text order; where one list's terms overlap, the
        longest (网络赌博 over 赌博), while each list that matches has its own hit."""
        self._refresh()
        if not self._terms or not text:
            return []
        normalised, index = normalise(text)
        hits: list[TextHit] = []
        for end, number in self._automaton.matches(normalised):
            term, list_name, written = self._terms[number]
            start = end - len(term)
            if not _whole_word(normalised, start, end):
                continue
            source_start, source_end = index[start], index[end - 1] + 1
            confidence = _term_confidence(text, normalised, index, start, end)
            matched = text[source_start:source_end]
            hits.append(
                TextHit("term", matched, written, source_start, source_end, confidence, list_name)
            )
        kept: list[TextHit] = []
        reach: dict[str | None, int] = {}  # per list: the end of the widest hit so far
        for hit in sorted(hits, key=lambda hit: (hit.start, -hit.end)):
            if reach.get(hit.list_name, -1) < hit.end:
                reach[hit.list_name] = hit.end
                kept.append(hit)
        return kept

    def _refresh(self) -> None:
        now = time.monotonic()
        if self._checked_at is not None and now - self._checked_at < self._check_every_s:
            return
        self._checked_at = now
        found = self._stamps()
        if {name: stamp for name, (_, stamp) in found.items()} == {
            name: listed.stamp for name, listed in self._files.items()
        }:
            return
        read: dict[str, _ListFile] = {}
        for name, (path, stamp) in found.items():
            known = self._files.get(name)
            if known is not None and known.stamp == stamp:
                read[name] = known
                continue
            try:
                read[name] = _ListFile(stamp, _read_terms(path))
            except (OSError, UnicodeError) as error:
                # Kept with its old stamp, so the next check tries it again.
                log.warning("term list %s not read (%s); keeping its previous terms", path, error)
                if known is not None:
                    read[name] = known
        self._files = read
        self._terms = [
            (term, name, written)
            for name, listed in sorted(read.items())
            for term, written in listed.terms.items()
        ]
        self._automaton = _Automaton([term for term, _, _ in self._terms])
        log.info("term lists read: %s", self.lists)

    def _stamps(self) -> dict[str, tuple[Path, tuple[int, int]]]:
        if self._folder is None or not self._folder.is_dir():
            return {}
        stamps: dict[str, tuple[Path, tuple[int, int]]] = {}
        for path in sorted(self._folder.glob("*.txt")):
            try:
                stat = path.stat()
            except OSError:  # removed while we looked
                continue
            stamps[path.stem] = (path, (stat.st_mtime_ns, stat.st_size))
        return stamps
