"""Ranked lists of search rows into hits: reciprocal rank fusion, then one hit per place.

Both searches of a query (BM25 over the terms, nearest neighbours of its embedding) rank the
same rows; each list adds ``1 / (RRF_K + rank)`` to a row's score. Hits of one video whose
spans overlap are then merged into one (``merged``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.search import STRETCH_KINDS, SegmentHit

RRF_K = 60
SNIPPET_CHARS = 200


@dataclass
class Candidate:
    """A row of the ranked lists, its fused score and the kinds of search that found it."""

    row: dict[str, Any]
    score: float = 0.0
    kinds: set[str] = field(default_factory=set)


def fuse(lists: Sequence[list[dict[str, Any]]]) -> list[Candidate]:
    """Reciprocal rank fusion of ranked row lists, best first."""
    by_key: dict[tuple[str, str], Candidate] = {}
    for rows in lists:
        for rank, row in enumerate(rows):
            key = (row["video_id"], row["segment"])
            candidate = by_key.setdefault(key, Candidate(row, kinds={row["kind"]}))
            candidate.score += 1.0 / (RRF_K + rank + 1)
    return sorted(by_key.values(), key=lambda c: -c.score)


def merged(candidates: Sequence[Candidate]) -> list[SegmentHit]:
    """One hit per overlapping run of one video's candidates, in order of the best score:
    a caption and the sentence said while it shows are one place, not two (a chapter or a
    summary stays a place of its own). Its text is the
    best match's, then the others' (``·`` between them). A candidate that bridges two hits
    joins them, and a hit grown over another takes it in."""
    hits: list[SegmentHit] = []
    for candidate in candidates:  # best first, so the first of a run sets its text and score
        found = _hit(candidate)
        at = next((i for i, hit in enumerate(hits) if _overlap(hit, found)), None)
        if at is None:
            hits.append(found)
            continue
        hits[at] = _join(hits[at], found)
        while others := [i for i, hit in enumerate(hits) if i != at and _overlap(hit, hits[at])]:
            first, *rest = sorted([at, *others])  # the better hits come first
            joined = hits[first]
            for i in rest:
                joined = _join(joined, hits[i])
            hits = [hit for i, hit in enumerate(hits) if i not in rest]
            at, hits[first] = first, joined
    return hits


def _hit(candidate: Candidate) -> SegmentHit:
    row = candidate.row
    return SegmentHit(
        video_id=row["video_id"],
        tenant=row["tenant"],
        start_s=float(row["start_s"]),
        end_s=float(row["end_s"]),
        text=_snippet(str(row["text"])),
        kinds=tuple(sorted(candidate.kinds)),
        score=round(candidate.score, 6),
        shot=row["shot"],
        partial=bool(row["partial"]),
    )


def _join(better: SegmentHit, other: SegmentHit) -> SegmentHit:
    """One place of two overlapping hits: the better one's score and text first."""
    texts = better.text.split(" · ")
    texts += [text for text in other.text.split(" · ") if text not in texts]
    return replace(
        better,
        start_s=min(better.start_s, other.start_s),
        end_s=max(better.end_s, other.end_s),
        text=_snippet(" · ".join(texts)),
        kinds=tuple(sorted({*better.kinds, *other.kinds})),
        shot=better.shot if better.shot is not None else other.shot,
        partial=better.partial or other.partial,
    )


def _snippet(text: str) -> str:
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


def _overlap(one: SegmentHit, other: SegmentHit) -> bool:
    """Whether two hits are one place: moments of one video whose spans overlap (a chapter or
    a summary is a place of its own, ``STRETCH_KINDS``)."""
    if STRETCH_KINDS.intersection(one.kinds) or STRETCH_KINDS.intersection(other.kinds):
        return False
    return (
        one.video_id == other.video_id and other.start_s < one.end_s and one.start_s < other.end_s
    )
