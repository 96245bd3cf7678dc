"""The library of fingerprints a video is looked up in: the ``fingerprints`` table, held in
memory with an index on its hashes.

Each hash is split into four 16-bit bands, and each band's values are sorted: a frame of a
copy whose hash differs by a few bits still equals the original in one band, most often, and
a lookup also tries each band with its weakest bits flipped (``models.frame_hash``), so one
``searchsorted`` per band finds the candidates of every sample of a video at once. A
candidate is a video with hashes within ``max_distance`` bits of the video's; whether it is a
copy is decided on the whole of both sequences (``stages.duplicate_match``).

The table's rows are read once; after that, ``refresh`` reads only the fragments written
since, as a segment of their own (a video's rows are in the fragment of its write), and
segments are merged when there are many. A fragment removed or with rows deleted (a video
analysed again, a video forgotten, a compaction) makes the next refresh read it all again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from sinks.lance_table import LanceTable

BANDS = 4
_BAND_BITS = 16
_WEAK_PER_BAND = 3  # weak bits of a band tried flipped: 8 probes a band
# A band value held by more rows than this (a frame every video shares) is not looked up.
MAX_BUCKET = 4096
_MAX_SEGMENTS = 8

U64 = NDArray[np.uint64]


@dataclass(frozen=True)
class Probe:
    """One sample of the video looked up: its hash and weak bits."""

    value: int
    weak: int


@dataclass
class LibraryVideo:
    """One library video's samples, in time order."""

    video_id: str
    tenant: str
    times: NDArray[np.float32]
    hashes: U64


@dataclass
class _Segment:
    """Rows read together, sorted by video then time, with each band's values sorted."""

    hashes: U64
    times: NDArray[np.float32]
    videos: NDArray[np.int32]  # index into the library's video ids
    band_order: list[NDArray[np.int32]] = field(default_factory=list)
    band_keys: list[NDArray[np.uint16]] = field(default_factory=list)
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # video -> its rows

    @classmethod
    def of(cls, hashes: U64, times: NDArray[np.float32], videos: NDArray[np.int32]) -> _Segment:
        if not _in_order(videos, times):  # rows read back are in the order they were written
            order = np.lexsort((times, videos))
            hashes, times, videos = hashes[order], times[order], videos[order]
        segment = cls(hashes, times, videos)
        for band in range(BANDS):
            keys = band_of(segment.hashes, band).astype(np.uint16)
            by_key = np.argsort(keys, kind="stable").astype(np.int32, copy=False)
            segment.band_order.append(by_key)
            segment.band_keys.append(keys[by_key])
        if segment.videos.size:
            changes = np.flatnonzero(np.diff(segment.videos)) + 1
            starts = np.concatenate(([0], changes))
            ends = np.concatenate((changes, [segment.videos.size]))
            segment.spans = {
                int(segment.videos[s]): (int(s), int(e)) for s, e in zip(starts, ends, strict=True)
            }
        return segment

    @property
    def size(self) -> int:
        return int(self.hashes.size)


def _in_order(videos: NDArray[np.int32], times: NDArray[np.float32]) -> bool:
    """Whether rows are sorted by video, then time."""
    if videos.size < 2:
        return True
    step = np.diff(videos)
    return bool(np.all(step >= 0) and np.all((step > 0) | (np.diff(times) >= 0)))


def band_of(hashes: U64, band: int) -> U64:
    """The ``band``-th 16 bits of each hash."""
    return (hashes >> np.uint64(band * _BAND_BITS)) & np.uint64((1 << _BAND_BITS) - 1)


def probes_of(probes: Sequence[Probe], band: int) -> tuple[NDArray[np.uint16], NDArray[np.int64]]:
    """Each probe's band value, and the values with its weakest bits there flipped: the keys
    to look up, and the probe each is for."""
    keys: list[int] = []
    owners: list[int] = []
    shift = band * _BAND_BITS
    mask = (1 << _BAND_BITS) - 1
    for i, probe in enumerate(probes):
        value = (probe.value >> shift) & mask
        weak = (probe.weak >> shift) & mask
        bits = [1 << b for b in range(_BAND_BITS) if weak >> b & 1][:_WEAK_PER_BAND]
        for size in range(len(bits) + 1):
            for flipped in combinations(bits, size):
                keys.append(value ^ sum(flipped))
                owners.append(i)
    return np.asarray(keys, dtype=np.uint16), np.asarray(owners, dtype=np.int64)


class FingerprintLibrary:
    """The fingerprints of the videos in the table, and the lookup of a video's samples."""

    def __init__(self, table: LanceTable) -> None:
        self._table = table
        self._ids: list[str] = []
        self._index: dict[str, int] = {}
        self._tenants: list[str] = []
        self._tenant_names: dict[str, int] = {}
        self._tenant_codes = np.zeros(0, dtype=np.int32)  # each video's tenant, as a code
        self._segments: list[_Segment] = []
        self._fragments: dict[int, object] = {}  # fragment id -> its deletion file
        self._version: int | None = None

    @property
    def nbytes(self) -> int:
        """The memory the index holds, in bytes."""
        total = 0
        for s in self._segments:
            total += s.hashes.nbytes + s.times.nbytes + s.videos.nbytes
            total += sum(a.nbytes for a in s.band_order) + sum(a.nbytes for a in s.band_keys)
        return total

    @property
    def rows(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def videos(self) -> int:
        return len({v for segment in self._segments for v in segment.spans})

    def refresh(self) -> None:
        """Read what was written since the last refresh (all of it where rows went)."""
        dataset = self._table.open()
        if dataset is None or dataset.version == self._version:
            return
        fragments = {f.fragment_id: f for f in dataset.get_fragments()}
        stale = any(
            fragment_id not in fragments
            or fragments[fragment_id].metadata.deletion_file != deletions
            for fragment_id, deletions in self._fragments.items()
        )
        if stale:
            self._clear()
        columns = ["video_id", "tenant", "time_s", "hash"]
        new = [f for i, f in sorted(fragments.items()) if i not in self._fragments]
        if new:
            self._add([fragment.to_table(columns=columns) for fragment in new])
        self._fragments = {i: f.metadata.deletion_file for i, f in fragments.items()}
        self._version = dataset.version
        if len(self._segments) > _MAX_SEGMENTS:
            self._merge()

    def _clear(self) -> None:
        self._ids, self._index, self._tenants = [], {}, []
        self._tenant_codes = np.zeros(0, dtype=np.int32)
        self._segments, self._fragments = [], {}

    def _video(self, video_id: str, tenant: str) -> int:
        index = self._index.get(video_id)
        if index is None:
            index = self._index[video_id] = len(self._ids)
            self._ids.append(video_id)
            self._tenants.append(tenant)
        return index

    def _add(self, tables: Sequence[pa.Table]) -> None:
        table = pa.concat_tables(tables)
        # Each distinct (video, tenant) once: the rows hold their codes in the dictionary.
        pairs = pc.binary_join_element_wise(table["video_id"], table["tenant"], "\x00")
        encoded = pc.dictionary_encode(pairs).combine_chunks()
        known = [self._video(*pair.split("\x00", 1)) for pair in encoded.dictionary.to_pylist()]
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        videos = np.asarray(known, dtype=np.int32)[codes]
        hashes = table.column("hash").to_numpy().astype(np.int64).view(np.uint64)
        times = table.column("time_s").to_numpy().astype(np.float32)
        self._segments.append(_Segment.of(hashes, times, videos))

    def _merge(self) -> None:
        if len(self._segments) > 1:
            self._segments = [
                _Segment.of(
                    np.concatenate([s.hashes for s in self._segments]),
                    np.concatenate([s.times for s in self._segments]),
                    np.concatenate([s.videos for s in self._segments]),
                )
            ]

    def sequence(self, video: int) -> LibraryVideo:
        """A library video's samples, in time order."""
        parts = [(s, s.spans[video]) for s in self._segments if video in s.spans]
        times = np.concatenate([s.times[a:b] for s, (a, b) in parts])
        hashes = np.concatenate([s.hashes[a:b] for s, (a, b) in parts])
        order = np.argsort(times, kind="stable")
        return LibraryVideo(self._ids[video], self._tenants[video], times[order], hashes[order])

    def hits(
        self,
        probes: Sequence[Probe],
        *,
        max_distance: int,
        tenant: str | None,
        exclude: str,
    ) -> dict[int, set[int]]:
        """The library videos with a hash within ``max_distance`` bits of a probe's (of
        ``tenant``'s, or any tenant's where None; never ``exclude``), each with the probes
        that found it."""
        if not probes:
            return {}
        values = np.asarray([p.value for p in probes], dtype=np.uint64)
        excluded = self._index.get(exclude, -1)
        allowed = None if tenant is None else self._of_tenant(tenant)
        found: dict[int, set[int]] = {}
        for segment in self._segments:
            rows, owners = self._candidates(segment, probes)
            if rows.size == 0:
                continue
            close = np.bitwise_count(segment.hashes[rows] ^ values[owners]) <= max_distance
            videos = segment.videos[rows[close]]
            owners = owners[close]
            keep = videos != excluded
            if allowed is not None:
                keep &= allowed[videos]
            for video, owner in zip(videos[keep].tolist(), owners[keep].tolist(), strict=True):
                found.setdefault(video, set()).add(owner)
        return found

    def _of_tenant(self, tenant: str) -> NDArray[np.bool_]:
        """Whether each video is ``tenant``'s (the tenants' codes kept between lookups)."""
        if self._tenant_codes.size != len(self._tenants):
            names = {name: i for i, name in enumerate(dict.fromkeys(self._tenants))}
            self._tenant_names = names
            self._tenant_codes = np.asarray([names[t] for t in self._tenants], dtype=np.int32)
        code = self._tenant_names.get(tenant, -1)
        return np.asarray(self._tenant_codes == code, dtype=bool)

    @staticmethod
    def _candidates(
        segment: _Segment, probes: Sequence[Probe]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The rows sharing a (probed) band value with a probe, and the probe of each."""
        all_rows: list[NDArray[np.int64]] = []
        all_owners: list[NDArray[np.int64]] = []
        for band in range(BANDS):
            keys, owners = probes_of(probes, band)
            sorted_keys = segment.band_keys[band]
            lo = np.searchsorted(sorted_keys, keys, side="left")
            hi = np.searchsorted(sorted_keys, keys, side="right")
            counts = hi - lo
            counts[counts > MAX_BUCKET] = 0
            total = int(counts.sum())
            if total == 0:
                continue
            first = np.repeat(lo - (np.cumsum(counts) - counts), counts)
            positions = first + np.arange(total)
            all_rows.append(segment.band_order[band][positions].astype(np.int64))
            all_owners.append(np.repeat(owners, counts))
        if not all_rows:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        # A row found by several probes or bands comes more than once; ``hits`` keeps sets.
        return np.concatenate(all_rows), np.concatenate(all_owners)
