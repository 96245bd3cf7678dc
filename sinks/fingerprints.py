"""Table ``fingerprints``: each video's frame hashes (``models.frame_hash``) at a fixed rate,
the library re-uploads are looked up in (``sinks.fingerprint_library``).

A row per kept sample: the first sample of each ``EVERY_S`` slot of the video whose picture
is not flat (a black or one-colour frame tells no video from another), keyed by video and
sample. A video analysed again replaces its rows; a forgotten one loses them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from core.config import StorageSettings
from core.records import Frame, VideoResult
from core.stage_names import FINGERPRINT
from models.frame_hash import FrameHash
from sinks.lance_rows import latest_per_video, sql_string
from sinks.lance_table import LanceTable
from sinks.table_sinks import TableSink

TABLE = "fingerprints"
#: The fixed rate of the fingerprint: one hash a slot of this many seconds.
EVERY_S = 1.0


def fingerprints_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("video_id", pa.string(), nullable=False),
            pa.field("tenant", pa.string(), nullable=False),
            pa.field("sample", pa.int32(), nullable=False),
            pa.field("time_s", pa.float32(), nullable=False),
            # The 64 bits as a signed integer (Lance has no unsigned 64-bit type in SQL).
            pa.field("hash", pa.int64(), nullable=False),
        ]
    )


@dataclass(frozen=True)
class Sampled:
    """One kept sample of a video's fingerprint."""

    index: int
    time_s: float
    hash: FrameHash


def fingerprint_of(frames: Sequence[Frame]) -> list[Sampled]:
    """The kept samples of a video: the first hashed sample of each ``EVERY_S`` slot whose
    picture is not flat, in time order."""
    kept: dict[int, Sampled] = {}
    for frame in sorted(frames, key=lambda f: f.timestamp_s):
        raw = frame.output(FINGERPRINT)
        if not raw:
            continue
        slot = math.floor(frame.timestamp_s / EVERY_S + 1e-6)
        if slot in kept:
            continue
        hashed = FrameHash.from_json(raw)
        if not hashed.flat:
            kept[slot] = Sampled(frame.index, frame.timestamp_s, hashed)
    return list(kept.values())


def signed(value: int) -> int:
    """A 64-bit hash as the signed integer the table stores."""
    return value - (1 << 64) if value >= 1 << 63 else value


class LanceFingerprintSink(TableSink):
    """Writes each video's fingerprint rows; a video without them keeps none."""

    name = "lance_fingerprints"
    KEYS = ("video_id", "sample")

    def __init__(self, table: LanceTable) -> None:
        self.table = table

    @classmethod
    def from_settings(cls, storage: StorageSettings) -> LanceFingerprintSink:
        return cls(LanceTable.from_settings(storage, TABLE))

    def write(self, results: Sequence[VideoResult]) -> None:
        results = latest_per_video(results)
        rows = pa.Table.from_pylist(list(_rows(results)), schema=fingerprints_schema())
        if not results or (rows.num_rows == 0 and self.table.open() is None):
            return  # nothing hashed, and no table to take old rows from
        self.table.create(fingerprints_schema(), keys=self.KEYS)
        self.table.upsert(rows, keys=list(self.KEYS), video_ids=[r.ref.video_id for r in results])

    def count_rows(self, video_id: str | None = None) -> int:
        where = None if video_id is None else f"video_id = {sql_string(video_id)}"
        return self.table.count_rows(where)


def _rows(results: Sequence[VideoResult]) -> Iterator[dict[str, object]]:
    for result in results:
        for sample in fingerprint_of(result.frames):
            yield {
                "video_id": result.ref.video_id,
                "tenant": result.ref.tenant,
                "sample": sample.index,
                "time_s": np.float32(sample.time_s).item(),
                "hash": signed(sample.hash.value),
            }
