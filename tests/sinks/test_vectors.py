"""The vector index: lean rows, nearest video first, tenant filter, exact and ANN search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sinks.errors import SinkRejected
from sinks.vectors import LanceVectorIndex
from tests.sinks import make_result, unit_vectors


@pytest.fixture
def index(tmp_path: Path) -> LanceVectorIndex:
    return LanceVectorIndex(str(tmp_path / "lance"))


def test_search_on_an_empty_index_finds_nothing(index: LanceVectorIndex) -> None:
    assert index.search(unit_vectors(1)[0], k=5) == []


def test_nearest_video_comes_first(index: LanceVectorIndex) -> None:
    results = [make_result(f"v{i}", frames=10, seed=i) for i in range(6)]
    index.write(results)
    target = results[3].frames[4]
    assert target.embedding is not None
    noisy = target.embedding + 0.05 * unit_vectors(1, seed=99)[0]

    hits = index.search(noisy, k=5)
    assert len(hits) == 5
    assert (hits[0].video_id, hits[0].frame_index) == ("v3", 4)
    assert hits[0].text == "v3 says 4"
    assert hits[0].timestamp_s == pytest.approx(2.0)
    assert [h.score for h in hits] == sorted(h.score for h in hits)
    assert hits[0].score < 0.05


def test_tenant_filter_keeps_other_tenants_out(index: LanceVectorIndex) -> None:
    mine = make_result("mine", frames=5, tenant="acme", seed=1)
    theirs = make_result("theirs", frames=5, tenant="globex", seed=2)
    index.write([mine, theirs])
    query = theirs.frames[0].embedding
    assert query is not None

    hits = index.search(query, k=3, tenant="acme")
    assert len(hits) == 3
    assert {h.tenant for h in hits} == {"acme"}
    assert index.search(query, k=1)[0].video_id == "theirs"


def test_only_frames_with_embeddings_are_stored_once_per_run_of_text(
    index: LanceVectorIndex,
) -> None:
    texts = ["hello", "hello", "hello", "world", "hello", "", ""]
    result = make_result("a", frames=7, texts=texts)
    result.frames[3].embedding = None
    index.write([result, make_result("b", frames=4, embed=False)])

    rows = index.vector_rows("a")
    # "world" has no embedding, so the second "hello" run continues the first one.
    assert [(r["frame_index"], r["text"]) for r in rows] == [(0, "hello"), (5, ""), (6, "")]
    assert index.count_rows("b") == 0


def test_rewrite_under_a_new_version_replaces_the_vectors(index: LanceVectorIndex) -> None:
    index.write([make_result("a", frames=10), make_result("b", frames=10, seed=1)])
    index.write([make_result("a", frames=10), make_result("b", frames=10, seed=1)])
    assert index.count_rows() == 20
    index.write([make_result("a", frames=4, version="v2", seed=5)])
    assert index.count_rows("a") == 4
    assert {r["pipeline_version"] for r in index.vector_rows("a")} == {"v2"}
    index.write([make_result("b", frames=3, embed=False, version="v2")])
    assert index.count_rows("b") == 0


def test_query_of_the_wrong_dimension_is_rejected(index: LanceVectorIndex) -> None:
    index.write([make_result("a", frames=2)])
    with pytest.raises(SinkRejected):
        index.search(np.ones(8, dtype=np.float32), k=1)


@pytest.mark.parametrize("index_type", ["IVF_SQ", "IVF_HNSW_SQ"])
def test_ann_index_is_built_past_the_threshold_and_extended(
    tmp_path: Path, index_type: str
) -> None:
    index = LanceVectorIndex(
        str(tmp_path / "lance"), index_min_rows=300, index_refresh_rows=100, index_type=index_type
    )
    first = [make_result(f"v{i}", frames=20, seed=i) for i in range(10)]
    index.write(first)
    assert index.upkeep.wait_idle(60)
    assert not index.has_index()  # 200 rows: exact search

    second = [make_result(f"w{i}", frames=20, seed=100 + i) for i in range(10)]
    index.write(second)
    assert index.upkeep.wait_idle(60)  # built in the background
    assert index.has_index()

    target = second[7].frames[11].embedding
    assert target is not None
    hits = index.search(target, k=3)
    assert (hits[0].video_id, hits[0].frame_index) == ("w7", 11)
    assert hits[0].score == pytest.approx(0.0, abs=0.02)

    # Rows written after the index still come back (searched exactly until folded in).
    late = make_result("late", frames=5, seed=999)
    index.write([late])
    late_vector = late.frames[2].embedding
    assert late_vector is not None
    assert index.search(late_vector, k=1)[0].video_id == "late"
    index.write([make_result(f"x{i}", frames=20, seed=200 + i) for i in range(6)])
    assert index.upkeep.wait_idle(60)
    dataset = index.table.open()
    assert dataset is not None
    described = [i for i in dataset.describe_indices() if i.name == "embedding_idx"]
    assert described[0].num_rows_indexed == dataset.count_rows()
    assert index.search(late_vector, k=1, tenant="default")[0].video_id == "late"


def test_search_after_compaction_of_an_indexed_table(tmp_path: Path) -> None:
    index = LanceVectorIndex(str(tmp_path / "lance"), index_min_rows=200)
    results = [make_result(f"v{i}", frames=20, seed=i) for i in range(12)]
    for result in results:
        index.write([result])
    assert index.upkeep.wait_idle(60)
    assert index.has_index()
    index.write([make_result("v5", frames=10, seed=50, version="v2")])  # deletions to fold in
    index.table.compact()
    target = results[9].frames[13].embedding
    assert target is not None
    hits = index.search(target, k=2)
    assert (hits[0].video_id, hits[0].frame_index) == ("v9", 13)
    assert index.count_rows("v5") == 10
    assert index.has_index()


def test_search_prints_no_lance_warning(
    index: LanceVectorIndex, capfd: pytest.CaptureFixture[str]
) -> None:
    # Lance logs from Rust straight to the stderr file descriptor (no Python warning), e.g.
    # when a vector search does not ask for `_distance` by name.
    index.write([make_result(f"v{i}", frames=4, seed=i) for i in range(3)])
    capfd.readouterr()
    assert index.search(unit_vectors(1)[0], k=2, tenant="default")
    assert index.search(unit_vectors(1)[0], k=2)
    assert capfd.readouterr().err == ""
