"""The frame image vector table's index upkeep (LanceImageIndex): exact search below the
threshold, an ANN index built in the background past it and extended with later rows, rows
not yet indexed still found, search after compaction, and no Lance noise on stderr. Random
unit vectors stand in for an image model's."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.records import VideoResult
from sinks.images import LanceImageIndex
from tests.sinks import make_result, unit_vectors, with_image_vectors

MODEL = "random-images"


def pictured(video_id: str, *, frames: int = 20, seed: int = 0, version: str = "v1") -> VideoResult:
    return with_image_vectors(make_result(video_id, frames=frames, seed=seed, version=version))


def has_index(index: LanceImageIndex) -> bool:
    dataset = index.table.open()
    return dataset is not None and any(
        described.name == "embedding_idx" for described in dataset.describe_indices()
    )


def nearest_key(index: LanceImageIndex, result: VideoResult, frame: int) -> tuple[str, int]:
    vector = result.frames[frame].image_embedding
    assert vector is not None
    (row,) = index.nearest(vector, 1, None)
    return row["video_id"], row["frame_index"]


def test_an_ann_index_is_built_past_the_threshold_and_extended(tmp_path: Path) -> None:
    index = LanceImageIndex(str(tmp_path), MODEL, vector_index_min_rows=300)
    try:
        index.write([pictured(f"v{i}", seed=i) for i in range(10)])
        assert index.upkeep.wait_idle(60)
        assert not has_index(index)  # 200 rows: exact search

        second = [pictured(f"w{i}", seed=100 + i) for i in range(10)]
        index.write(second)
        assert index.upkeep.wait_idle(60)  # built in the background
        assert has_index(index)
        assert nearest_key(index, second[7], 11) == ("w7", 11)

        # Rows written after the index still come back (searched exactly until folded in).
        late = pictured("late", frames=5, seed=999)
        index.write([late])
        assert nearest_key(index, late, 2) == ("late", 2)
        index.write([pictured(f"x{i}", seed=200 + i) for i in range(6)])
        assert index.upkeep.wait_idle(60)
        dataset = index.table.open()
        assert dataset is not None
        (described,) = [i for i in dataset.describe_indices() if i.name == "embedding_idx"]
        assert described.num_rows_indexed == dataset.count_rows()
        assert nearest_key(index, late, 2) == ("late", 2)
    finally:
        index.close()


def test_search_after_compaction_of_an_indexed_table(tmp_path: Path) -> None:
    index = LanceImageIndex(str(tmp_path), MODEL, vector_index_min_rows=200)
    try:
        results = [pictured(f"v{i}", seed=i) for i in range(12)]
        for result in results:
            index.write([result])
        index.refresh()
        assert has_index(index)
        index.write([pictured("v5", frames=10, seed=50, version="v2")])  # deletions to fold in
        index.table.compact()
        assert nearest_key(index, results[9], 13) == ("v9", 13)
        assert index.table.count_rows("video_id = 'v5'") == 10
        assert has_index(index)
    finally:
        index.close()


def test_a_search_prints_no_lance_warning(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Lance logs from Rust straight to the stderr file descriptor (no Python warning), e.g.
    # when a vector search does not ask for `_distance` by name.
    index = LanceImageIndex(str(tmp_path), MODEL)
    index.write([pictured(f"v{i}", frames=4, seed=i) for i in range(3)])
    capfd.readouterr()
    query = unit_vectors(1)[0]
    assert index.nearest(query, 2, "tenant = 'default'")
    assert index.nearest(query, 2, None)
    assert capfd.readouterr().err == ""
    index.close()
