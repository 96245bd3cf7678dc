"""Hybrid search over what videos show and say: table ``search_<embedder>``.

One row per searchable segment (``sinks.views``: text spans, speech segments, shot
descriptions) with its text, its search terms (``core.terms``) and its embedding by one text
model. A query runs two searches over the same rows, both filtered first (tenant, video,
kind, time range): BM25 over the terms (Lance's inverted index) and nearest neighbours of the
query's embedding; their rankings are fused by reciprocal rank (``sinks.search_ranking``: each
list adds ``1 / (60 + rank)``), so a word written on screen and a sentence of the same meaning
in another language both come up without weighing scores of different scales against each
other.
Hits of one video whose spans overlap are merged into one.

The table is named after the embedder and its release: vectors of two models never share an
index, and the search answers from the configured model only. The writer embeds each
segment's text itself (a few milliseconds each), so a new model fills its table from stored
text, with nothing decoded.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from core.config import StorageSettings
from core.records import VideoResult
from core.search import Method, SearchFilter, SegmentHit
from core.terms import index_terms
from models.base import TextEmbeddingModel
from sinks.images import FRAME_KIND, ImageSearch
from sinks.indexes import IndexUpkeep, TextIndexJob, VectorIndexJob
from sinks.lance_rows import (
    columns_table,
    latest_per_video,
    model_table_name,
    sql_string,
    table_uri,
    video_predicate,
)
from sinks.lance_table import LanceTable, map_lance_error
from sinks.search_ranking import Candidate, fuse, merged
from sinks.search_rows import result_rows, segment_key
from sinks.table_sinks import TableSink

RECENT_TEXTS = 4096  # texts whose embedding is kept for the next write
_COLUMNS = ["video_id", "tenant", "kind", "segment", "start_s", "end_s", "text", "shot", "partial"]


def search_table_name(model_id: str) -> str:
    """``search_<model>_<digest>``: readable, and distinct for every model id."""
    return model_table_name("search", model_id)


def search_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("video_id", pa.string(), nullable=False),
            pa.field("tenant", pa.string()),
            pa.field("kind", pa.string(), nullable=False),
            pa.field("segment", pa.string(), nullable=False),  # see sinks.search_rows
            pa.field("start_s", pa.float64()),
            pa.field("end_s", pa.float64()),
            pa.field("text", pa.string()),
            pa.field("terms", pa.string()),
            pa.field("embedding", pa.list_(pa.float32(), dim)),
            pa.field("shot", pa.int32()),  # the shot at the middle, if it has a thumbnail
            pa.field("partial", pa.bool_()),  # written before its video was done
            pa.field("pipeline_version", pa.string()),
            pa.field("written_at", pa.timestamp("us", tz="UTC")),
        ]
    )


def filter_sql(where: SearchFilter) -> str | None:
    """``where`` as a Lance filter, None when it limits nothing."""
    clauses = []
    if where.tenant is not None:
        clauses.append(f"tenant = {sql_string(where.tenant)}")
    if where.video_id is not None:
        clauses.append(f"video_id = {sql_string(where.video_id)}")
    if where.kinds:
        clauses.append(f"kind IN ({', '.join(sql_string(k) for k in where.kinds)})")
    if where.start_s is not None:
        clauses.append(f"end_s >= {float(where.start_s)!r}")
    if where.end_s is not None:
        clauses.append(f"start_s <= {float(where.end_s)!r}")
    return " AND ".join(clauses) or None


class LanceSearchIndex(TableSink):
    """The searchable segments of every video under one text embedder."""

    name = "lance_search"
    KEYS = ("video_id", "segment")

    def __init__(
        self,
        root: str | LanceTable,
        embedder: TextEmbeddingModel,
        *,
        vector_index_min_rows: int = 10_000,
        nprobes: int = 16,
        refine_factor: int = 4,
        images: ImageSearch | None = None,
    ) -> None:
        """``root``: the folder or ``s3://`` prefix of the tables, or the table itself.
        ``embedder``: loaded on ``open()`` if it is not yet. ``images``: frames by their
        pixels, a third list of hybrid searches (none: text and speech only)."""
        if not isinstance(root, LanceTable):
            root = LanceTable(table_uri(root, search_table_name(embedder.model_id)))
        self.table = root
        self.embedder = embedder
        self.nprobes = nprobes
        self.refine_factor = refine_factor
        self.images = images
        vectors = VectorIndexJob(
            "embedding_idx", min_rows=vector_index_min_rows, refresh_rows=vector_index_min_rows // 4
        )
        self.upkeep = IndexUpkeep(root, [TextIndexJob("terms_idx"), vectors])
        self._loaded = False
        self._recent: OrderedDict[str, Any] = OrderedDict()

    @classmethod
    def from_settings(
        cls,
        storage: StorageSettings,
        embedder: TextEmbeddingModel,
        *,
        images: ImageSearch | None = None,
    ) -> LanceSearchIndex:
        table = LanceTable.from_settings(storage, search_table_name(embedder.model_id))
        return cls(
            table, embedder, vector_index_min_rows=storage.vector_index_min_rows, images=images
        )

    def open(self) -> None:
        self._load()
        self.table.create(search_schema(self.embedder.dimension), keys=self.KEYS)
        self.upkeep.ask()  # the full-text index must exist before the first text query

    def _load(self) -> None:
        if not self._loaded:
            self.embedder.load()
            self._loaded = True

    def close(self) -> None:
        """Stop the index upkeep (the embedder is the caller's: it may be shared)."""
        self.upkeep.close()
        if self.images is not None:
            self.images.close()

    # -- writing ---------------------------------------------------------------------------

    def write(self, results: Sequence[VideoResult]) -> None:
        """The videos' rows become exactly those of their results: partial rows written while
        they were analysed are replaced, or removed if the whole video does not have them."""
        results = latest_per_video(results)
        if results:
            rows = self._embedded(results, partial=False)
            video_ids = [result.ref.video_id for result in results]
            self.table.upsert(self.table_of(rows), keys=list(self.KEYS), video_ids=video_ids)
            self.upkeep.ask()

    def write_partial(self, results: Sequence[VideoResult]) -> None:
        """Segments of parts of videos (a chunk's frames, a window of speech), searchable at
        once and marked partial. They are merged by key and nothing is removed: each result
        holds one part, and the video's final ``write`` settles what stays."""
        if results:
            rows = self._embedded(results, partial=True)
            self.table.merge(self.table_of(rows), keys=list(self.KEYS))
            self.upkeep.ask()

    def drop_partial(self, video_ids: Sequence[str]) -> None:
        """Remove the partial rows of videos that will not be done (they failed)."""
        if video_ids:
            self.table.delete(f"{video_predicate(video_ids)} AND partial = true")

    def _embedded(self, results: Sequence[VideoResult], *, partial: bool) -> list[dict[str, Any]]:
        written_at = datetime.now(UTC)
        rows = [row for r in results for row in result_rows(r, written_at, partial=partial)]
        return self.embedded(rows)

    def embedded(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` with the embedding of their text."""
        self._load()
        # A chunk's texts come again in its video's final write, and a caption or subtitle
        # often repeats: each text is embedded once while it is recent.
        missing = sorted({row["text"] for row in rows} - self._recent.keys())
        if missing:
            for text, vector in zip(missing, self.embedder.embed(missing), strict=True):
                self._recent[text] = vector
        for row in rows:
            row["embedding"] = self._recent[row["text"]]
            self._recent.move_to_end(row["text"])
        while len(self._recent) > RECENT_TEXTS:
            self._recent.popitem(last=False)
        return rows

    def write_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rows already embedded (keys as in ``search_schema``; ``terms``, and ``segment``
        where missing, computed here), appended as they are: for bulk loads of new videos."""
        written_at = datetime.now(UTC)
        taken: set[str] = set()
        full = [
            {"shot": None, "partial": False, "pipeline_version": "", "written_at": written_at}
            | row
            | {"terms": index_terms(row["text"])}
            | _keyed(row, taken)
            for row in rows
        ]
        self._load()
        table = self.table_of(full)
        dataset = self.table.open() or self.table.create(table.schema, keys=self.KEYS)
        try:
            dataset.insert(table)
        except Exception as exc:
            raise map_lance_error(exc, table=self.table.name) from exc
        self.upkeep.ask()

    def refresh(self) -> None:
        """Build or refresh the indexes now, in this thread, once the background upkeep has
        served what it was asked (two passes at once would race to commit)."""
        self.upkeep.wait_idle()
        self.upkeep.run_now()

    def table_of(self, rows: list[dict[str, Any]]) -> pa.Table:
        schema = search_schema(self.embedder.dimension)
        columns = {name: [row.get(name) for row in rows] for name in schema.names}
        return columns_table(columns, schema)

    # -- searching -------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        where: SearchFilter | None = None,
        method: Method = "hybrid",
    ) -> list[SegmentHit]:
        """The ``k`` best places for ``query`` by ``method``, hits of one span merged."""
        where = where or SearchFilter()
        dataset = self.table.open()
        if dataset is None or k <= 0 or not query.strip():
            return []
        depth = max(4 * k, 40)  # candidates per list, before fusing and merging
        lists: list[list[dict[str, Any]]] = []
        if method in ("hybrid", "vector"):
            lists.append(self._nearest(dataset, query, depth, where))
        if method in ("hybrid", "text"):
            lists.append(self._matching(dataset, query, depth, where))
        wants_frames = not where.kinds or FRAME_KIND in where.kinds
        if method == "hybrid" and self.images is not None and wants_frames:
            # Every row of the frames table is of kind frame: the other filters apply.
            lists.append(self.images.search(query, depth, filter_sql(replace(where, kinds=()))))
        if method == "hybrid":
            candidates = fuse(lists)
        else:
            candidates = [Candidate(row, row["_value"], {row["kind"]}) for row in lists[0]]
        return merged(candidates)[:k]

    def _nearest(
        self, dataset: Any, query: str, depth: int, where: SearchFilter
    ) -> list[dict[str, Any]]:
        self._load()
        vector = self.embedder.embed_queries([query])[0]
        nearest = {
            "column": "embedding",
            "q": np.asarray(vector, dtype=np.float32),
            "k": depth,
            "metric": "cosine",
            "nprobes": self.nprobes,
            "refine_factor": self.refine_factor,
        }
        rows = self._scan(
            dataset, columns=[*_COLUMNS, "_distance"], nearest=nearest, filter=filter_sql(where)
        )
        for row in rows:
            row["_value"] = 1.0 - float(row.pop("_distance"))
        rows.sort(key=lambda row: -row["_value"])
        return rows

    def _matching(
        self, dataset: Any, query: str, depth: int, where: SearchFilter
    ) -> list[dict[str, Any]]:
        terms = index_terms(query)
        if not terms:
            return []
        rows = self._scan(
            dataset,
            columns=[*_COLUMNS, "_score"],
            full_text_query={"query": terms, "columns": ["terms"]},
            filter=filter_sql(where),
            limit=depth,
        )
        for row in rows:
            row["_value"] = float(row.pop("_score"))
        rows.sort(key=lambda row: -row["_value"])
        return rows

    def _scan(self, dataset: Any, **options: Any) -> list[dict[str, Any]]:
        try:
            table = dataset.to_table(prefilter=True, **options)
        except Exception as exc:
            if "INVERTED index" in str(exc):
                return []  # no full-text index yet: the first rows are being indexed
            raise map_lance_error(exc, table=self.table.name) from exc
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows

    def count_rows(self, video_id: str | None = None) -> int:
        return self.table.count_rows(None if video_id is None else video_predicate([video_id]))


def _keyed(row: dict[str, Any], taken: set[str]) -> dict[str, str]:
    """The row's ``segment`` key, made from its content where the row has none."""
    if row.get("segment"):
        return {"segment": str(row["segment"])}
    return {"segment": segment_key(row["kind"], float(row["start_s"]), str(row["text"]), taken)}
