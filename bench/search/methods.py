"""How well and how fast search finds what videos show and say (``bench.search.corpus``).

    python -m bench.search.methods [--json OUT] [--workdir DIR] [--quick] [--no-table]

The corpus's edits (English and Chinese captions, English speech) run through the real stages
with the sequential runner, as ``bench.quality.pipeline`` runs them, and their results are
written to each index searched:

- ``minilm_frames``: the per-frame search the segments index replaced, kept as a baseline:
  MiniLM vectors of each frame's text (a run of frames showing the same text counted once),
  searched by an exact scan; it sees on-screen text only, never speech;
- ``minilm_vector``, ``e5_vector``: the segments index (``sinks.search``: text spans, speech,
  shot descriptions) searched by the vectors of MiniLM (English) or multilingual E5;
- ``use_vector``: the same with the Universal Sentence Encoder multilingual;
- ``full_text``: the same index, BM25 over its terms; ``hybrid_e5``, ``hybrid_use``: a vector
  list and the full-text list, fused; ``hybrid``: that of the default text model.

The answers are found among other videos' segments (``--haystack``, 2000 by default): signs
of the corpus's code forms with other codes (DOOR A31, GATE C4, ITEM 81234, TICKET 50321;
``corpus.haystack``), written to every index, relevant to no query.

Each query asks for ``HITS`` hits: ``recall_at_5`` is the mean over queries of the share of
their relevant spans covered by the first five, ``mrr`` the mean reciprocal rank of the first
relevant hit among all ``HITS``. Latency is measured apart, on tables of ``write_rows`` rows
(10k and 100k; 1k and 10k with ``--quick``) whose texts mix English and Chinese phrases with
random codes and numbers; embedding as many texts would take longer than the rest, so a few
hundred phrases are embedded and each row takes one of their vectors with a little noise.
Each method answers the same queries after one untimed warm-up, the query's embedding
included.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.quality.corpus import Edit, write_corpus
from bench.quality.pipeline import SAMPLE_FPS
from bench.runs import in_workdir, write_json
from bench.search import progressive
from bench.search.corpus import (
    KINDS,
    Query,
    Span,
    corpus,
    edit_truths,
    first_relevant_rank,
    haystack,
    recall_at,
    reciprocal_rank,
    relevant_spans,
)
from bench.search.latency import HITS, latency, refreshed
from core.config import ServiceConfig, StageSettings
from core.records import VideoRef, VideoResult
from core.search import Method
from models.base import TextEmbeddingModel
from models.embedding import text_embedder
from sinks.search import LanceSearchIndex
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner

E5 = "multilingual-e5-small"
USE = "use-multilingual-v3"
MINILM = "all-MiniLM-L6-v2"
DEFAULT = StageSettings().embed.model  # ``hybrid`` and ``full_text`` use the default model
METHODS = (
    *("minilm_frames", "minilm_vector", "e5_vector", "use_vector", "full_text"),
    *("hybrid_e5", "hybrid_use", "hybrid"),
)
RECALL_AT = 5


@dataclass(frozen=True)
class Hit:
    """A hit of any index, as scoring sees it: where it is, what it says, how it scored."""

    span: Span
    text: str
    score: float


Search = Callable[[str], list[Hit]]


def run_stages(edits: Sequence[Edit], paths: Sequence[Path], workdir: Path) -> list[VideoResult]:
    """Each edit's result from the real stages (``shots`` sampling, speech recognised with
    word times, as ``bench.quality.pipeline`` runs them); the video id is the edit's name."""
    config = ServiceConfig.load(
        limits={"file_roots": (str(workdir),)},
        runtime={"workdir": str(workdir / "work"), "executor": "local"},
        stages={"sample_mode": "shots", "sample_fps": SAMPLE_FPS},
        asr={"enabled": True, "word_timestamps": True},
    )
    runner = SequentialRunner(Pipeline.from_config(config))
    runner.setup()
    try:
        return [
            runner.run_one(VideoRef(video_id=edit.name, uri=path.resolve().as_uri()))
            for edit, path in zip(edits, paths, strict=True)
        ]
    finally:
        runner.teardown()


class FrameVectors:
    """The baseline: a vector per frame of text (the first of each run of frames showing the
    same text), nearest by cosine over all of them."""

    def __init__(self, embedder: TextEmbeddingModel) -> None:
        self._embedder = embedder
        self._frames: list[tuple[str, float, str]] = []  # video, time, text
        self._vectors: list[npt.NDArray[np.float32]] = []

    def add(self, results: Sequence[VideoResult]) -> None:
        for result in results:
            shown: list[tuple[str, float, str]] = []  # video, time, text
            for frame in sorted(result.frames, key=lambda f: (f.timestamp_s, f.index)):
                text = frame.text.strip()
                if text and (not shown or shown[-1][2] != text):
                    shown.append((result.ref.video_id, frame.timestamp_s, text))
            if shown:
                vectors = self._embedder.embed([text for *_, text in shown])
                self._vectors.extend(_unit(np.asarray(v, dtype=np.float32)) for v in vectors)
                self._frames.extend(shown)

    def __len__(self) -> int:
        return len(self._frames)

    def search(self, query: str) -> list[Hit]:
        if not self._frames:
            return []
        vector = _unit(np.asarray(self._embedder.embed_queries([query])[0], dtype=np.float32))
        scores = np.stack(self._vectors) @ vector
        nearest = np.argsort(-scores, kind="stable")[:HITS]
        # A frame is an instant.
        return [
            Hit(Span(video_id, at, at), text, float(scores[i]))
            for i in nearest
            for video_id, at, text in [self._frames[i]]
        ]


def _unit(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def segment_search(index: LanceSearchIndex, method: Method) -> Search:
    def search(query: str) -> list[Hit]:
        return [
            Hit(Span(h.video_id, h.start_s, h.end_s), h.text, h.score)
            for h in index.search(query, k=HITS, method=method)
        ]

    return search


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def score(
    queries: Sequence[Query], relevant: Sequence[Sequence[Span]], searches: Mapping[str, Search]
) -> dict[str, Any]:
    """Recall at ``RECALL_AT`` and MRR per method, overall and by kind of query, and each
    query's rank, recall and first hits per method. A search that fails counts as no hits,
    and its error is kept with the query."""
    per_query: list[dict[str, Any]] = []
    recalls: dict[str, dict[str, list[float]]] = {m: {k: [] for k in KINDS} for m in searches}
    ranks: dict[str, dict[str, list[float]]] = {m: {k: [] for k in KINDS} for m in searches}
    for query, spans in zip(queries, relevant, strict=True):
        found: dict[str, Any] = {}
        for method, search in searches.items():
            error = None
            try:
                hits = search(query.text)
            except Exception as exc:
                hits, error = [], f"{type(exc).__name__}: {exc}"
            found_spans = [hit.span for hit in hits]
            recall = recall_at(found_spans, spans, RECALL_AT)
            recalls[method][query.kind].append(recall)
            ranks[method][query.kind].append(reciprocal_rank(found_spans, spans))
            found[method] = {
                "rank": first_relevant_rank(found_spans, spans),
                "recall_at_5": round(recall, 4),
                "top": [_hit_json(hit) for hit in hits[:RECALL_AT]],
            } | ({"error": error} if error else {})
        per_query.append(
            {
                "query": query.text,
                "kind": query.kind,
                "relevant": [_span_json(span) for span in spans],
                "methods": found,
            }
        )

    def overall(values: Mapping[str, Mapping[str, list[float]]]) -> dict[str, float | None]:
        return {m: _mean([v for kind in values[m].values() for v in kind]) for m in values}

    def by_kind(values: Mapping[str, Mapping[str, list[float]]]) -> dict[str, Any]:
        return {m: {k: _mean(v) for k, v in values[m].items() if v} for m in values}

    return {
        "recall_at_5": overall(recalls),
        "mrr": overall(ranks),
        "recall_at_5_by_kind": by_kind(recalls),
        "mrr_by_kind": by_kind(ranks),
        "per_query": per_query,
    }


def _span_json(span: Span) -> list[Any]:
    return [span.video_id, round(span.start_s, 2), round(span.end_s, 2)]


def _hit_json(hit: Hit) -> list[Any]:
    return [*_span_json(hit.span), hit.text, round(hit.score, 4)]


def measure(workdir: Path, quick: bool, hay: int | None = None) -> dict[str, Any]:
    """``hay``: segments of other videos the answers are found among (default 2000, 200
    with ``quick``)."""
    hay = hay if hay is not None else (200 if quick else 2000)
    started = time.monotonic()
    edits, queries = corpus(quick)
    truths = write_corpus(edits, workdir / "videos")
    written = time.monotonic()
    results = run_stages(edits, [t.path for t in truths], workdir)
    analysed = time.monotonic()
    by_name = edit_truths(edits, truths)
    relevant = [relevant_spans(query, by_name) for query in queries]
    roots = workdir / "indexes"
    shutil.rmtree(roots, ignore_errors=True)  # the videos are kept between runs, not these
    models = {name: text_embedder(name) for name in (E5, USE, MINILM)}
    for model in models.values():
        model.load()
    e5, use, minilm = models[E5], models[USE], models[MINILM]
    frames = FrameVectors(minilm)
    segments = {
        model: LanceSearchIndex(str(roots / "segments"), model) for model in models.values()
    }
    default = segments[models[DEFAULT]]
    others = haystack(hay)
    try:
        for batch in (results, others):
            frames.add(batch)
        for index in segments.values():
            index.open()
            index.write(results)
            index.write(others)
            refreshed(index)
        indexed = time.monotonic()
        searches: dict[str, Search] = {
            "minilm_frames": frames.search,
            "minilm_vector": segment_search(segments[minilm], "vector"),
            "e5_vector": segment_search(segments[e5], "vector"),
            "use_vector": segment_search(segments[use], "vector"),
            "full_text": segment_search(default, "text"),
            "hybrid_e5": segment_search(segments[e5], "hybrid"),
            "hybrid_use": segment_search(segments[use], "hybrid"),
            "hybrid": segment_search(default, "hybrid"),
        }
        report = score(queries, relevant, searches)
        searched = time.monotonic()
        sizes = (1_000, 10_000) if quick else (10_000, 100_000)
        timed = latency(models[DEFAULT], roots / "latency", sizes)
        report["segments"] = default.count_rows()
        # Quick: a 36 s video is done in seconds, before its parts' period (5 s) is up.
        findable = asyncio.run(
            progressive.run(
                workdir / "progressive", 36 if quick else 120, every_s=0.5 if quick else None
            )
        )
        report["frames"] = len(frames)
    finally:
        for index in segments.values():
            index.close()
    done = time.monotonic()
    return {
        "recall_at_5": report.pop("recall_at_5"),
        "mrr": report.pop("mrr"),
        "latency_ms": timed.ms,
        "queries": len(queries),
        "segments": report.pop("segments"),
        # Seconds from a chunk's analysis to its segments found by search, on one long video
        # through the per-video orchestration (``bench.search.progressive``).
        "chunk_to_searchable_p95_s": findable["chunk_to_searchable_p95_s"],
        "progressive": findable,
        **report,
        "corpus": {
            "quick": quick,
            "videos": len(edits),
            "haystack_segments": hay,
            "video_s": round(sum(t.duration_s for t in truths), 2),
            "queries_by_kind": {k: sum(q.kind == k for q in queries) for k in KINDS},
            "hits": HITS,
            "models": {name: model.model_id for name, model in models.items()},
            "default": DEFAULT,
        },
        "latency_load": timed.loads,
        "runtime": {
            "total_s": round(done - started, 2),
            "write_s": round(written - started, 2),
            "analyse_s": round(analysed - written, 2),
            "index_s": round(indexed - analysed, 2),
            "search_s": round(searched - indexed, 2),
            "latency_s": round(done - searched, 2),
            "cpus": os.cpu_count(),
        },
    }


def table(result: dict[str, Any]) -> str:
    """The figures as plain text: quality per method and kind, latency, then what the hybrid
    search missed."""

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    about = result["corpus"]
    kinds = [k for k in KINDS if about["queries_by_kind"][k]]
    rows = [
        f"search on {about['videos']} edits ({about['video_s']:.0f} s of video), "
        f"{result['queries']} queries, {result['segments']} segments, {about['hits']} hits each",
        f"{'method':<15}{'R@5':>6}{'MRR':>6}  recall@5 by kind: "
        + " ".join(f"{k}({about['queries_by_kind'][k]})" for k in kinds),
    ]
    for method in METHODS:
        by_kind = result["recall_at_5_by_kind"][method]
        rows.append(
            f"{method:<15}{fmt(result['recall_at_5'][method]):>6}{fmt(result['mrr'][method]):>6}  "
            + " ".join(f"{k}={fmt(by_kind.get(k))}" for k in kinds)
        )
    rows.append(f"{'latency (ms)':<22}{'p50':>8}{'p95':>8}")
    for size, methods in result["latency_ms"].items():
        for method, figures in methods.items():
            rows.append(
                f"{size + ' rows ' + method:<22}{figures['p50']:>8.1f}{figures['p95']:>8.1f}"
            )
    for entry in result["per_query"]:
        hybrid = entry["methods"]["hybrid"]
        if hybrid["recall_at_5"] < 1.0:
            top = "; ".join(f"{h[0]}@{h[1]}-{h[2]} {h[3]!r}" for h in hybrid["top"][:3])
            rows.append(f"  hybrid missed {entry['query']!r} ({entry['kind']}): {top}")
    runtime = result["runtime"]
    rows.append(
        f"runtime: {runtime['total_s']:.0f} s (videos {runtime['write_s']:.0f} s, stages "
        f"{runtime['analyse_s']:.0f} s, indexing {runtime['index_s']:.0f} s, latency "
        f"{runtime['latency_s']:.0f} s)"
    )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--workdir", type=Path, help="where videos and indexes are written")
    parser.add_argument("--quick", action="store_true", help="four edits and eight queries")
    parser.add_argument(
        "--haystack", type=int, help="segments of other videos to search among (2000; 200 quick)"
    )
    parser.add_argument(
        "--table", action=argparse.BooleanOptionalAction, default=True, help="print a table"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = in_workdir(
        lambda path: measure(path, args.quick, args.haystack), args.workdir, "reelsense-search-"
    )
    if args.table:
        print(table(result))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
