"""Query latency of the search index on large tables (``bench.search.methods``'s second half).

Tables of ``write_rows`` rows whose texts mix English and Chinese phrases with random codes
and numbers; embedding as many texts would take longer than the rest, so a few hundred phrases
are embedded and each row takes one of their vectors with a little noise. Each method answers
the same queries after one untimed warm-up, the query's embedding included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.search.phrases import latency_queries, phrase_bank, row_text
from core.records import Vector
from core.search import Method
from models.base import TextEmbeddingModel
from sinks.search import LanceSearchIndex

HITS = 10
QUERIES_TIMED = 50
METHODS_TIMED: tuple[Method, ...] = ("hybrid", "vector", "text")
NOISE = 0.01  # per dimension: a row's vector stays within cosine ~0.98 of its phrase's
ROWS_PER_WRITE = 10_000
SEGMENTS_PER_VIDEO = 40


def _latency_rows(
    count: int, phrases: Sequence[str], vectors: Vector, rng: np.random.Generator
) -> Iterator[list[dict[str, Any]]]:
    """``count`` rows in writes of ``ROWS_PER_WRITE``: each a phrase with random codes and
    numbers, and that phrase's vector with a little noise, renormalised."""
    for start in range(0, count, ROWS_PER_WRITE):
        size = min(ROWS_PER_WRITE, count - start)
        picks = rng.integers(0, len(phrases), size)
        noisy = vectors[picks] + rng.normal(0, NOISE, (size, vectors.shape[1])).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        rows = []
        for n, pick, vector in zip(range(start, start + size), picks, noisy, strict=True):
            seq = n % SEGMENTS_PER_VIDEO
            rows.append(
                {
                    "video_id": f"latency-{n // SEGMENTS_PER_VIDEO:06d}",
                    "tenant": f"tenant-{n // SEGMENTS_PER_VIDEO % 8}",
                    "kind": "speech" if seq % 3 == 0 else "text",
                    "start_s": 4.0 * seq,
                    "end_s": 4.0 * seq + 3.5,
                    "text": row_text(phrases[pick], rng),
                    "embedding": vector,
                }
            )
        yield rows


def _percentiles(seconds: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {
        "p50": round(float(np.percentile(ms, 50)), 2),
        "p95": round(float(np.percentile(ms, 95)), 2),
    }


@dataclass
class LatencyFigures:
    """Per table size (rows, as a string): each method's p50 and p95 in ms (and the query
    embedding's alone, the same for every size); and what loading the table took and which
    indexes it then had (name: rows covered)."""

    ms: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    loads: dict[str, dict[str, Any]] = field(default_factory=dict)


def latency(embedder: TextEmbeddingModel, root: Path, sizes: Sequence[int]) -> LatencyFigures:
    figures = LatencyFigures()
    queries = latency_queries(np.random.default_rng(7), QUERIES_TIMED)
    phrases = phrase_bank()
    vectors = embedder.embed([row_text(p, np.random.default_rng(0)) for p in phrases])
    embedder.embed_queries(queries[:1])
    embedding = _timed(lambda query: embedder.embed_queries([query]), queries)
    for size in sizes:
        index = LanceSearchIndex(str(root / f"rows-{size}"), embedder)
        index.open()
        try:
            started = time.monotonic()
            for rows in _latency_rows(size, phrases, vectors, np.random.default_rng(size)):
                index.write_rows(rows)
            written = time.monotonic()
            refreshed(index)
            indexed = time.monotonic()
            dataset = index.table.open()
            described = dataset.describe_indices() if dataset is not None else []
            figures.loads[str(size)] = {
                "write_s": round(written - started, 2),
                "refresh_s": round(indexed - written, 2),
                "rows": index.count_rows(),
                "indexes": {i.name: int(i.num_rows_indexed) for i in described},
            }
            figures.ms[str(size)] = {"embed_query": embedding}
            for method in METHODS_TIMED:
                index.search(queries[0], k=HITS, method=method)  # warm-up: caches, index load
                search = partial(index.search, k=HITS, method=method)
                figures.ms[str(size)][method] = _timed(search, queries)
        finally:
            index.upkeep.close()  # not ``close()``: the embedder is shared, and closed last
    return figures


def refreshed(index: LanceSearchIndex) -> None:
    """Every row of the index indexed. Writes ask the background upkeep for indexes, and a
    refresh alongside it can lose the race to commit (and log it): it finishes first."""
    index.upkeep.wait_idle()
    index.refresh()


def _timed(call: Callable[[str], object], queries: Sequence[str]) -> dict[str, float]:
    """The p50 and p95 of the milliseconds ``call`` takes on each query."""
    seconds = []
    for query in queries:
        mark = time.perf_counter()
        call(query)
        seconds.append(time.perf_counter() - mark)
    return _percentiles(seconds)
