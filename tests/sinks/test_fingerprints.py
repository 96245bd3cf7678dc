"""Table ``fingerprints`` and the library on it (real Lance): one row a second of each
video's hashed samples, flat pictures left out; a refresh reads only what was written since,
and reads everything again once rows went (a video analysed again, a video forgotten); the
lookup finds videos by close hashes, per tenant, never the video itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.records import VideoRef, VideoResult
from core.stage_names import FINGERPRINT
from models.frame_hash import FrameHash
from sinks.fingerprint_library import BANDS, FingerprintLibrary, Probe, band_of, probes_of
from sinks.fingerprints import TABLE, LanceFingerprintSink, fingerprint_of
from sinks.lance_table import LanceTable
from tests.sinks import make_result


def hashes(seed: int, count: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(rng.integers(0, 1 << 62)) << 1 for _ in range(count)]


def hashed(video_id: str, values: list[int], *, tenant: str = "default", step_s: float = 0.5,
           flat: frozenset[int] = frozenset()) -> VideoResult:  # fmt: skip
    """A result whose samples carry ``values`` as their fingerprints."""
    result = make_result(video_id, frames=len(values), tenant=tenant, step_s=step_s, embed=False)
    for i, (frame, value) in enumerate(zip(result.frames, values, strict=True)):
        frame.extras[FINGERPRINT] = FrameHash(
            value, ~value & ((1 << 64) - 1), 0, 0, i in flat
        ).to_json()
    return result


def library_on(root: Path) -> tuple[LanceFingerprintSink, FingerprintLibrary]:
    table = LanceTable(str(root / f"{TABLE}.lance"))
    return LanceFingerprintSink(table), FingerprintLibrary(table)


def probes(values: list[int]) -> list[Probe]:
    return [Probe(value, 0) for value in values]


def test_a_row_a_second_of_pictures_that_are_not_flat(tmp_path: Path) -> None:
    sink, _ = library_on(tmp_path)
    values = hashes(1, 20)
    result = hashed("a", values, step_s=0.5, flat=frozenset({0, 1}))  # 10 s, 2 samples a second
    kept = fingerprint_of(result.frames)
    # Second 0 has only flat samples; the others keep their first sample.
    assert [s.time_s for s in kept] == [float(t) for t in range(1, 10)]
    sink.write([result])
    assert sink.count_rows("a") == 9
    sink.write([make_result("plain", frames=4, embed=False)])  # nothing hashed: no rows
    assert sink.count_rows() == 9


def test_a_lookup_finds_close_hashes_per_tenant_never_the_video_itself(tmp_path: Path) -> None:
    sink, library = library_on(tmp_path)
    a, b = hashes(2, 10), hashes(3, 10)
    sink.write([hashed("a", a, step_s=1.0), hashed("b", b, step_s=1.0, tenant="other")])
    library.refresh()
    assert (library.videos, library.rows) == (2, 20)
    # A copy of a: every hash with 6 bits flipped.
    copy = [value ^ 0b1111110 << 20 for value in a]
    found = library.hits(probes(copy), max_distance=10, tenant="default", exclude="copy")
    assert {library.sequence(v).video_id: len(by) for v, by in found.items()} == {"a": 10}
    assert library.hits(probes(copy), max_distance=10, tenant="other", exclude="copy") == {}
    assert library.hits(probes(a), max_distance=10, tenant=None, exclude="a") == {}
    anyone = library.hits(probes(b), max_distance=0, tenant=None, exclude="x")
    assert [library.sequence(v).tenant for v in anyone] == ["other"]
    sequence = library.sequence(next(iter(found)))
    assert sequence.times.tolist() == [float(t) for t in range(10)]
    assert sequence.hashes.tolist() == a


def test_a_refresh_reads_new_writes_and_rereads_after_rows_went(tmp_path: Path) -> None:
    sink, library = library_on(tmp_path)
    library.refresh()  # no table yet
    assert library.videos == 0
    sink.write([hashed("a", hashes(4, 6), step_s=1.0)])
    library.refresh()
    sink.write([hashed("b", hashes(5, 6), step_s=1.0)])
    library.refresh()
    assert (library.videos, library.rows) == (2, 12)
    assert len(library._segments) == 2  # the second write read on its own
    again = hashes(6, 3)
    sink.write([hashed("a", again, step_s=1.0)])  # analysed again: its old rows go
    library.refresh()
    assert (library.videos, library.rows) == (2, 9)
    (found,) = library.hits(probes(again), max_distance=0, tenant=None, exclude="x")
    assert library.sequence(found).hashes.tolist() == again
    sink.forget([VideoRef("b", "file:///b.mp4")])
    library.refresh()
    assert (library.videos, library.rows) == (1, 3)


def test_each_band_is_probed_with_its_weak_bits_flipped() -> None:
    value = (0xABCD << 16) | 0x1234
    weak = 0b111 << 16 | 0b1  # three weak bits in band 1, one in band 0
    keys, owners = probes_of([Probe(value, weak)], band=1)
    assert sorted(keys.tolist()) == sorted(0xABCD ^ flip for flip in range(8))
    assert set(owners.tolist()) == {0}
    keys, _ = probes_of([Probe(value, weak)], band=0)
    assert sorted(keys.tolist()) == [0x1234, 0x1234 ^ 1]
    assert [int(band_of(np.asarray([value], dtype=np.uint64), b)[0]) for b in range(BANDS)] == [
        0x1234, 0xABCD, 0, 0,
    ]  # fmt: skip
