"""Frame image vectors (LanceImageIndex) and the hybrid search's third list (ImageSearch): with
a tiny random CLIP, frames with no text at all are found by a text query, as kind ``frame``,
under the same tenant, video, kind and time filters as the text; and the table gives a later
run its vectors back."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.config import StorageSettings
from core.records import ShotBoundary, VideoResult
from core.search import SearchFilter
from devkit.tiny_clip import build_tiny_clip
from models.embedding import E5Embedder
from models.image_embedding import ClipEmbedder
from sinks.images import ImageSearch, LanceImageIndex, images_table_name
from sinks.lineup import sinks_from_settings
from sinks.search import LanceSearchIndex
from tests.sinks import make_result

QUERY = "a red car on the street at night"


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClipEmbedder]:
    model = ClipEmbedder(str(build_tiny_clip(tmp_path_factory.mktemp("sinks") / "tiny-clip")))
    model.load()
    yield model
    model.close()


@pytest.fixture(scope="module")
def e5() -> Iterator[E5Embedder]:
    model = E5Embedder(threads=1)
    model.load()
    yield model
    model.close()


def pictured(
    video_id: str, clip: ClipEmbedder, *, seed: int, tenant: str = "default", frames: int = 6
) -> VideoResult:
    """A video whose frames show nothing written (no OCR, no caption) but have the tiny CLIP's
    vectors of random pictures; one second per sample."""
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(frames)]
    vectors = clip.embed_images(images)
    made = make_result(
        video_id, frames=frames, texts=[""] * frames, tenant=tenant, embed=False, step_s=1.0
    )
    for frame, vector in zip(made.frames, vectors, strict=True):
        frame.image_embedding = vector
    return made


def best_frame(result: VideoResult, clip: ClipEmbedder) -> int:
    """The frame of ``result`` nearest to the query in the CLIP space."""
    query = clip.embed_texts([QUERY])[0]
    scores = [float(np.dot(f.image_embedding, query)) for f in result.frames]  # type: ignore[arg-type]
    return int(np.argmax(scores))


@pytest.fixture
def index(
    tmp_path: Path, clip: ClipEmbedder, e5: E5Embedder
) -> Iterator[tuple[LanceSearchIndex, LanceImageIndex]]:
    images = LanceImageIndex(str(tmp_path), clip.model_id)
    search = LanceSearchIndex(str(tmp_path), e5, images=ImageSearch(images, clip))
    search.open()
    yield search, images
    search.upkeep.close()
    images.close()


def test_frames_without_text_are_found_by_a_text_query(
    index: tuple[LanceSearchIndex, LanceImageIndex], clip: ClipEmbedder
) -> None:
    search, images = index
    silent = pictured("silent", clip, seed=1)
    worded = make_result("worded", frames=4, texts=["INVOICE 2048"] * 4, embed=False)
    # Another tenant's frame is exactly what the query says: it must still never come back.
    theirs = pictured("theirs", clip, seed=2, tenant="acme")
    theirs.frames[0].image_embedding = clip.embed_texts([QUERY])[0]
    for sink in (search, images):
        sink.write([silent, worded, theirs])
    search.refresh()

    hits = search.search(QUERY, k=20, where=SearchFilter(tenant="default"))
    framed = [hit for hit in hits if "frame" in hit.kinds]
    assert framed
    assert {hit.video_id for hit in framed} == {"silent"}
    assert all(hit.tenant == "default" for hit in hits)
    best = best_frame(silent, clip)
    top = framed[0]
    assert (top.start_s, top.end_s) == (float(best), float(best + 1))
    assert top.text == ""

    # Without the tenant filter the perfect match heads the frames list (the best fused score,
    # tied with the best of the text lists); with it, it is never seen.
    everyone = search.search(QUERY, k=20)
    (perfect, *_) = [hit for hit in everyone if hit.video_id == "theirs"]
    assert (perfect.start_s, perfect.kinds) == (0.0, ("frame",))
    assert perfect.score == max(hit.score for hit in everyone)
    # The other searches have no frames list.
    for method in ("vector", "text"):
        assert all("frame" not in h.kinds for h in search.search(QUERY, k=20, method=method))


def test_filters_apply_to_frames_as_to_text(
    index: tuple[LanceSearchIndex, LanceImageIndex], clip: ClipEmbedder
) -> None:
    search, images = index
    results = [pictured("one", clip, seed=3), pictured("two", clip, seed=4)]
    results.append(make_result("words", frames=4, texts=["THE END"] * 4, embed=False))
    for sink in (search, images):
        sink.write(results)

    def found(**where: object) -> list[tuple[str, tuple[str, ...], float, float]]:
        hits = search.search(QUERY, k=50, where=SearchFilter(**where))  # type: ignore[arg-type]
        return [(h.video_id, h.kinds, h.start_s, h.end_s) for h in hits]

    only_frames = found(kinds=("frame",))
    assert {video for video, *_ in only_frames} == {"one", "two"}
    assert {kinds for _, kinds, *_ in only_frames} == {("frame",)}
    assert all("frame" not in kinds for _, kinds, *_ in found(kinds=("text",)))
    assert {video for video, *_ in found(video_id="two", kinds=("frame",))} == {"two"}
    timed = found(kinds=("frame",), start_s=2.5, end_s=3.5)
    assert timed
    assert all(end >= 2.5 and start <= 3.5 for _, _, start, end in timed)
    assert found(tenant="nobody") == []


def test_rows_cover_analysed_frames_and_a_final_write_replaces_them(
    tmp_path: Path, clip: ClipEmbedder
) -> None:
    images = LanceImageIndex(str(tmp_path), clip.model_id)
    result = pictured("shots", clip, seed=5, frames=4)
    result.frames[0].thumbnail = b"jpeg"  # shot 0 has a thumbnail
    result.frames[1] = dataclasses.replace(result.frames[1], repeat_of=0, image_embedding=None)
    cut = ShotBoundary(timestamp_s=2.0, kind="cut", change=40.0, start_s=2.0, end_s=2.0)
    result.frames[2].boundaries = (cut,)  # shot 1 starts here, without a thumbnail
    images.write([result])
    rows = sorted(images.table.rows(), key=lambda row: row["frame_index"])
    # The repeat is its original's row: sample 0 shows until sample 2; the last to the end.
    assert [(r["frame_index"], r["start_s"], r["end_s"], r["shot"]) for r in rows] == [
        (0, 0.0, 2.0, 0),
        (2, 2.0, 3.0, None),
        (3, 3.0, 4.0, None),
    ]
    assert set(images.vectors("shots", "v1")) == {0, 2, 3}
    np.testing.assert_allclose(images.vectors("shots", "v1")[3], result.frames[3].image_embedding)  # type: ignore[arg-type]
    assert images.vectors("shots", "v0") == {}  # rows of another version give nothing

    again = dataclasses.replace(result, frames=result.frames[:1], pipeline_version="v2")
    images.write([again])
    assert [r["frame_index"] for r in images.table.rows()] == [0]
    assert set(images.vectors("shots", "v2")) == {0}


def test_the_writer_keeps_frame_vectors_only_with_an_image_model(
    tmp_path: Path, clip: ClipEmbedder
) -> None:
    storage = StorageSettings(lance_uri=str(tmp_path), object_store_uri=str(tmp_path / "o"))
    plain = sinks_from_settings(storage)
    assert not any(isinstance(sink, LanceImageIndex) for sink in plain)
    with_images = sinks_from_settings(storage, image_model=clip)
    (sink,) = [sink for sink in with_images if isinstance(sink, LanceImageIndex)]
    assert sink.table.name.endswith(images_table_name(clip.model_id))
    assert with_images[-1].name == "lance_videos"  # the summary stays last
