"""The parts of ``bench.perf.lance_upkeep``: the upkeep policies compared, the stream of writes
(parts of videos, then finished videos in small batches), and the sinks opened under a policy,
their compactions and index passes timed."""

from __future__ import annotations

import logging
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from bench.search.phrases import phrase_bank, row_text
from core.config import StorageSettings
from core.records import Frame, OcrLine, ProbeInfo, Vector, VideoRef, VideoResult
from models.base import TextEmbeddingModel
from sinks.indexes import IndexUpkeep
from sinks.lance import LanceSummarySink
from sinks.lance_rows import table_uri
from sinks.lance_table import LanceTable
from sinks.search import LanceSearchIndex

CHUNKS = 4  # partial writes per video
VIDEOS_PER_BATCH = 2  # finished videos per final write: a writer at modest load
TENANTS = 8
FRAME_S = 2.0
DIMENSION = 384
FREQUENT_COMPACT_EVERY = 16
FREQUENT_KEEP_S = 10.0
TABLES = ("search", "videos")
UPKEEP_LOGGERS = {"sinks.lance_table": "compaction", "sinks.indexes": "index"}
_DEFAULTS = StorageSettings.model_fields


@dataclass(frozen=True)
class Policy:
    compact_every: int
    keep_versions_s: float
    index_upkeep: bool


_KEEP_S = float(_DEFAULTS["lance_keep_versions_s"].default)
POLICIES = {
    "no_upkeep": Policy(0, _KEEP_S, index_upkeep=False),
    "defaults": Policy(int(_DEFAULTS["lance_compact_every"].default), _KEEP_S, index_upkeep=True),
    "frequent": Policy(FREQUENT_COMPACT_EVERY, FREQUENT_KEEP_S, index_upkeep=True),
}


class HashEmbedder(TextEmbeddingModel):
    """Unit vectors drawn from a hash of each text: the same text, the same vector."""

    @property
    def model_id(self) -> str:
        return "bench-hash"

    @property
    def dimension(self) -> int:
        return DIMENSION

    def load(self) -> None:
        pass

    def embed(self, texts: list[str]) -> Vector:
        vectors = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            drawn = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(DIMENSION)
            vectors[row] = drawn / np.linalg.norm(drawn)
        return vectors


class TimedTable(LanceTable):
    """A table that records how long each of its compactions takes."""

    def __init__(self, uri: str, policy: Policy) -> None:
        super().__init__(
            uri, compact_every=policy.compact_every, keep_versions_s=policy.keep_versions_s
        )
        self.compact_s: list[float] = []

    def compact(self) -> None:
        started = time.perf_counter()
        super().compact()
        self.compact_s.append(time.perf_counter() - started)

    def compactions(self) -> dict[str, int]:
        ms = [round(1000 * s) for s in self.compact_s] or [0]
        return {
            "count": len(self.compact_s),
            "mean_ms": round(sum(ms) / len(ms)),
            "last_ms": ms[-1],
        }


class TimedUpkeep(IndexUpkeep):
    """Index upkeep that adds up the time its passes take (they run in its own thread)."""

    busy_s = 0.0

    def run_now(self) -> None:
        if not self.jobs:
            return  # indexes not kept: no pass, not even the table's opening
        started = time.perf_counter()
        super().run_now()
        self.busy_s += time.perf_counter() - started


class WarningCount(logging.Handler):
    """The upkeep's warnings by kind: a failed compaction or index pass only logs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts = dict.fromkeys(UPKEEP_LOGGERS.values(), 0)

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[UPKEEP_LOGGERS[record.name]] += 1


class Stream:
    """The writes of a long run: parts of videos, then the finished videos in small batches."""

    def __init__(self, rows_per_commit: int) -> None:
        self.rows = rows_per_commit
        self.phrases = phrase_bank()
        self.finished: list[str] = []
        self._frames: dict[str, list[Frame]] = {}
        self._waiting: list[VideoResult] = []

    def part(self, step: int) -> VideoResult:
        """The ``step``-th part: the next ``rows`` frames of its video, each with a text of its
        own in a place of its own (one text span, one search row, per frame)."""
        video, chunk = divmod(step, CHUNKS)
        video_id = f"video-{video:06d}"
        rng = np.random.default_rng(step)
        frames = []
        for n in range(chunk * self.rows, (chunk + 1) * self.rows):
            text = row_text(self.phrases[int(rng.integers(len(self.phrases)))], rng)
            top = 40.0 * (n % 8)
            box = ((10.0, top), (400.0, top), (400.0, top + 30), (10.0, top + 30))
            frames.append(Frame(n, FRAME_S * n, None, ocr_lines=[OcrLine(text, 0.9, box)]))
        self._frames.setdefault(video_id, []).extend(frames)
        return _result(video_id, video, frames)

    def finished_batch(self, step: int) -> list[VideoResult]:
        """The videos to write after the ``step``-th part: a batch once enough are done."""
        video, chunk = divmod(step, CHUNKS)
        if chunk == CHUNKS - 1:
            video_id = f"video-{video:06d}"
            self._waiting.append(_result(video_id, video, self._frames.pop(video_id)))
            self.finished.append(video_id)
        if len(self._waiting) < VIDEOS_PER_BATCH:
            return []
        batch, self._waiting = self._waiting, []
        return batch


def _result(video_id: str, video: int, frames: list[Frame]) -> VideoResult:
    probe = ProbeInfo("mp4", "h264", 1280, 720, 30.0, FRAME_S * len(frames), 1, 1, 1_000_000)
    ref = VideoRef(video_id, f"s3://bench/{video_id}.mp4", tenant=f"tenant-{video % TENANTS}")
    return VideoResult(ref, "bench-v1", probe, frames, completed_at=datetime.now(UTC))


@dataclass
class Sinks:
    search: LanceSearchIndex
    summary: LanceSummarySink
    upkeep: TimedUpkeep
    tables: dict[str, TimedTable]

    @classmethod
    def opened(cls, root: Path, policy: Policy, vector_index_min_rows: int) -> Sinks:
        tables = {name: TimedTable(table_uri(str(root), name), policy) for name in TABLES}
        search = LanceSearchIndex(
            tables["search"], HashEmbedder(), vector_index_min_rows=vector_index_min_rows
        )
        upkeep = search.upkeep = TimedUpkeep(tables["search"], search.upkeep.jobs)
        summary = LanceSummarySink(tables["videos"])
        search.open()
        summary.open()
        if not policy.index_upkeep:
            search.refresh()  # the full-text index of the empty table, then none
            upkeep.jobs.clear()
        return cls(search, summary, upkeep, tables)
