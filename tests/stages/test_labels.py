"""What is in the picture: labels per sample from the real classifier, labels per shot with the
broader kinds, and search finding a shot by what it shows, in English and in Chinese."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.config import LabelSettings, ServiceConfig
from core.records import Frame, ProbeInfo, ShotBoundary, VideoRef, VideoResult
from core.search import SearchFilter
from devkit.photo_pans import DARKNET_SUBJECTS, darknet_photo, write_pans
from models.embedding import text_embedder
from sinks.search import LanceSearchIndex
from stages.labels import ShotLabelsStage
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner

SHOT_S = 3.0


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> ServiceConfig:
    root = tmp_path_factory.mktemp("media")
    return ServiceConfig.load(
        asr={"enabled": False},
        limits={"file_roots": [str(root)]},
        stages={"labels": {"cache_dir": str(root / "cache")}},
    )


@pytest.fixture(scope="module")
def photos_result(config: ServiceConfig) -> VideoResult:
    """A video of darknet's five photographs, a slow pan of 3 s each, through the pipeline."""
    root = Path(config.limits.file_roots[0])
    path = write_pans(root / "pans.mp4", [darknet_photo(n) for n in DARKNET_SUBJECTS])
    runner = SequentialRunner(Pipeline.from_config(config))
    runner.setup()
    try:
        return runner.run_one(VideoRef(video_id="pans", uri=path.as_uri()))
    finally:
        runner.teardown()


def test_each_sample_keeps_its_likeliest_classes(photos_result: VideoResult) -> None:
    for frame in photos_result.frames:
        labels = frame.output("labels")
        assert 1 <= len(labels) <= LabelSettings().top_k
        scores = [label["score"] for label in labels]
        assert scores == sorted(scores, reverse=True)
        assert all(0.01 <= score <= 1 for score in scores)


def test_each_photograph_is_labelled_with_the_kind_it_shows(photos_result: VideoResult) -> None:
    output = photos_result.outputs["shot_labels"]
    assert [round(s.start_s) for s in output.segments] == [0, 3, 6, 9, 12]
    right = [
        expected in [label["name"] for label in segment.attributes["labels"]]
        for segment, expected in zip(output.segments, DARKNET_SUBJECTS.values(), strict=True)
    ]
    assert sum(right) >= 4, [s.text for s in output.segments]
    assert all(s.kind == "label" and s.searchable for s in output.segments)
    # The video's labels, weighted by how long they are shown: animals throughout.
    assert output.data["labels"][0]["name"] == "animal"


@pytest.fixture(scope="module")
def index(
    tmp_path_factory: pytest.TempPathFactory, config: ServiceConfig, photos_result: VideoResult
) -> Iterator[LanceSearchIndex]:
    embedder = text_embedder(config.stages.embed.model)  # the default, multilingual
    embedder.load()
    sink = LanceSearchIndex(str(tmp_path_factory.mktemp("lance")), embedder)
    sink.open()
    sink.write([photos_result])
    sink.refresh()
    yield sink
    sink.upkeep.close()
    embedder.close()


@pytest.mark.parametrize("query", ["dog", "狗", "a bird", "鸟"])
def test_search_finds_the_shot_that_shows_it(index: LanceSearchIndex, query: str) -> None:
    expected = 0.0 if query in ("dog", "狗") else SHOT_S
    hits = index.search(query, k=3, where=SearchFilter(video_id="pans"))
    assert hits, query
    assert "label" in hits[0].kinds
    assert hits[0].start_s == pytest.approx(expected, abs=0.5), [h.text for h in hits]


def _frame(index: int, t: float, labels: list[tuple[int, float]], cut: bool = False) -> Frame:
    boundary = (ShotBoundary(t, "cut", 80.0, t, t),) if cut else ()
    frame = Frame(index=index, timestamp_s=t, image=None, boundaries=boundary)
    frame.extras["labels"] = [{"class": c, "name": "", "score": s} for c, s in labels]
    return frame


def _result(frames: list[Frame], duration_s: float) -> VideoResult:
    probe = ProbeInfo("mp4", "h264", 320, 180, 25.0, duration_s, 1, 0, 1000)
    return VideoResult(VideoRef("v", "file:///v.mp4"), "v1", probe, frames, datetime.now(UTC))


def test_a_kind_is_found_where_the_classifier_hesitates_between_its_classes() -> None:
    # Two samples of one shot torn between three terriers (none reaches the floor alone),
    # then a shot of a hare.
    terriers = [(187, 0.15), (189, 0.12), (191, 0.1)]
    frames = [
        _frame(0, 0.0, terriers),
        _frame(1, 1.0, terriers),
        _frame(2, 2.0, [(331, 0.9)], cut=True),
    ]
    output = ShotLabelsStage(LabelSettings()).analyse(_result(frames, 3.0))
    first, second = output.segments
    assert (first.start_s, first.end_s, first.text) == (0.0, 2.0, "dog, animal")
    assert first.attributes["labels"][0] == {"name": "dog", "score": 0.37, "broader": True}
    assert (second.start_s, second.end_s, second.text) == (2.0, 3.0, "hare, rabbit, animal")
    names = [label["name"] for label in output.data["labels"]]
    assert names[:2] == ["animal", "hare"]  # 0.9 of a third of the video beats 0.37 of 2/3


def test_weak_labels_are_dropped_and_strong_ones_capped() -> None:
    stage = ShotLabelsStage(LabelSettings(min_score=0.3, max_labels=2))
    weak = stage.analyse(_result([_frame(0, 0.0, [(0, 0.1), (500, 0.1)])], 1.0))
    assert weak.segments == ()  # nothing holds 0.3: no segment rather than a guess
    strong = stage.analyse(_result([_frame(0, 0.0, [(235, 0.8)])], 1.0))
    assert strong.segments[0].text == "German shepherd, dog"


def test_a_video_without_samples_has_no_labels() -> None:
    output = ShotLabelsStage(LabelSettings()).analyse(_result([], 0.0))
    assert output.segments == ()
    assert output.data == {"labels": []}
