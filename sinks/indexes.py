"""Index upkeep for Lance tables: built and refreshed in the background as rows arrive.

Queries never wait for an index: rows not yet in one are searched by a flat scan (vectors)
or a scan of the new fragments (full text), both exact. A write only asks for upkeep; one
background thread per table does it, and asks that arrive while it works fold into one more
pass. A failed pass costs only speed: it is logged and the next ask tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import lance

from sinks.lance_table import LanceTable, map_lance_error

log = logging.getLogger(__name__)

# Rows per IVF partition: a search reads ``nprobes`` partitions, so this bounds its work.
ROWS_PER_PARTITION = 4096


class IndexJob(Protocol):
    @property
    def name(self) -> str: ...

    def keep(self, dataset: lance.LanceDataset) -> None:
        """Build the index if it is due, or fold the rows it lacks into it."""


def _described(dataset: lance.LanceDataset, name: str) -> int | None:
    """The rows the index ``name`` covers, or None if it does not exist."""
    for index in dataset.describe_indices():
        if index.name == name:
            return int(index.num_rows_indexed)
    return None


@dataclass(frozen=True)
class VectorIndexJob:
    """An ANN index once the table has ``min_rows`` rows, refreshed every ``refresh_rows``.

    IVF_SQ is the default: on 20k 384-d vectors (2 shared cores) it built in 0.4 s with
    recall@10 of 1.0, where IVF_HNSW_SQ took 16 s for recall 0.84 and IVF_PQ took 58 s.
    """

    name: str
    column: str = "embedding"
    min_rows: int = 10_000
    refresh_rows: int = 2_500
    index_type: str = "IVF_SQ"

    def keep(self, dataset: lance.LanceDataset) -> None:
        rows = dataset.count_rows()
        indexed = _described(dataset, self.name)
        if indexed is None:
            if rows >= self.min_rows:
                dataset.create_index(
                    self.column,
                    self.index_type,
                    name=self.name,
                    metric="cosine",
                    num_partitions=max(1, rows // ROWS_PER_PARTITION),
                    replace=True,
                )
                log.info("built %s index %s over %d rows", self.index_type, self.name, rows)
        elif rows - indexed >= self.refresh_rows:
            dataset.optimize.optimize_indices(index_names=[self.name])


@dataclass(frozen=True)
class TextIndexJob:
    """An inverted (BM25) index over a column of whitespace-separated terms
    (``core.terms.index_terms``), built on the first rows and refreshed every
    ``refresh_rows``: a full-text query needs the index to exist at all."""

    name: str
    column: str = "terms"
    refresh_rows: int = 256

    def keep(self, dataset: lance.LanceDataset) -> None:
        rows = dataset.count_rows()
        indexed = _described(dataset, self.name)
        if indexed is None:
            dataset.create_scalar_index(
                self.column,
                "INVERTED",
                name=self.name,
                base_tokenizer="whitespace",
                lower_case=False,  # the terms are case-folded already
                stem=False,
                remove_stop_words=False,
                ascii_folding=False,
                with_position=False,
            )
            log.info("built full-text index %s over %d rows", self.name, rows)
        elif rows - indexed >= self.refresh_rows:
            dataset.optimize.optimize_indices(index_names=[self.name])


class IndexUpkeep:
    """Keeps a table's indexes, in a daemon thread started on the first ask."""

    def __init__(self, table: LanceTable, jobs: Sequence[IndexJob]) -> None:
        self.table = table
        self.jobs = list(jobs)
        self._asked = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ask(self) -> None:
        """Upkeep is due (rows were written); returns at once."""
        with self._lock:
            if self._closed:
                return
            self._idle.clear()
            self._asked.set()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"index-{self.table.name}", daemon=True
                )
                self._thread.start()

    def run_now(self) -> None:
        """One pass in the caller's thread (benchmarks, tests, a refresh on demand)."""
        dataset = self.table.open()
        if dataset is None:
            return
        for job in self.jobs:
            try:
                job.keep(dataset)
            except Exception as exc:
                error = map_lance_error(exc, table=self.table.name)
                log.warning("index %s on %s: upkeep failed: %s", job.name, self.table.name, error)
            dataset = self.table.open() or dataset

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Whether every ask so far has been served (within ``timeout`` seconds)."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        with self._lock:
            self._closed = True
            self._asked.set()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            self._asked.wait()
            with self._lock:
                if self._closed:
                    self._idle.set()
                    return
                self._asked.clear()
            self.run_now()
            with self._lock:
                if not self._asked.is_set():
                    self._idle.set()
