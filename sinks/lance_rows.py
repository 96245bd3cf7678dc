"""Names, filters and Arrow rows of the Lance tables: where a table lives, what a model's
vectors table is called, SQL literals for filters, and result rows as Arrow columns."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from core.records import VideoResult
from sinks.errors import SinkRejected


def table_uri(root: str, table: str) -> str:
    """The dataset URI of ``table`` under ``root`` (a folder or an ``s3://`` prefix)."""
    return f"{root.rstrip('/')}/{table}.lance"


def model_table_name(prefix: str, model_id: str) -> str:
    """``<prefix>_<model>_<digest>``: the table of one model's vectors, readable, and distinct
    for every model id (vectors of two models never share a table)."""
    slug = re.sub(r"[^a-z0-9]+", "_", model_id.lower()).strip("_")[:48]
    return f"{prefix}_{slug}_{hashlib.sha256(model_id.encode()).hexdigest()[:8]}"


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal for Lance filters."""
    return "'" + value.replace("'", "''") + "'"


def video_predicate(video_ids: Iterable[str]) -> str:
    return f"video_id IN ({', '.join(sql_string(v) for v in video_ids)})"


def latest_per_video(results: Sequence[VideoResult]) -> list[VideoResult]:
    """One result per video_id (the last submitted wins), in first-seen order."""
    by_id: dict[str, VideoResult] = {}
    for result in results:
        by_id[result.ref.video_id] = result
    return list(by_id.values())


def embedding_array(vectors: Sequence[Any], dim: int) -> pa.FixedSizeListArray:
    """A nullable fixed_size_list<float32>[dim] column; None entries become nulls."""
    values = np.zeros((len(vectors), dim), dtype=np.float32)
    mask = np.zeros(len(vectors), dtype=bool)
    for row, vector in enumerate(vectors):
        if vector is None:
            mask[row] = True
            continue
        flat = np.asarray(vector, dtype=np.float32).ravel()
        if flat.shape[0] != dim:
            raise SinkRejected(
                f"embedding has {flat.shape[0]} dimensions, the table has {dim}",
                code="sink_embedding_dim_mismatch",
            )
        values[row] = flat
    return pa.FixedSizeListArray.from_arrays(
        pa.array(values.ravel()), dim, mask=pa.array(mask) if mask.any() else None
    )


def columns_table(columns: dict[str, list[Any]], schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` from column lists; ``embedding`` is built as a vector column."""
    arrays = [
        embedding_array(columns[f.name], f.type.list_size)
        if f.name == "embedding"
        else pa.array(columns[f.name], type=f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def first_dim(results: Sequence[VideoResult]) -> int | None:
    for result in results:
        for frame in result.frames:
            if frame.embedding is not None:
                return int(np.asarray(frame.embedding).size)
    return None
