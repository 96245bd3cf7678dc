"""sinks.views: a result's shots, text spans and segments derived once per write and handed to
every sink of the line-up; no sink takes a view from another."""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sinks
from core.config import StorageSettings
from core.records import ShotBoundary, VideoResult
from core.speech import Speech, SpeechSegment
from models.embedding import E5Embedder
from models.image_embedding import ClipEmbedder
from sinks import views
from sinks.images import LanceImageIndex
from sinks.lineup import sinks_from_settings
from sinks.object_store import ResultDocumentSink
from sinks.search import LanceSearchIndex
from sinks.segments import LanceSegmentSink
from sinks.views import shared_views, views_of
from sinks.writer import SinkWriter
from tests.sinks import make_result, unit_vectors

TEXTS = ["OPEN", "OPEN", "OPEN", "", "SALE 50%", "SALE 50%"]


def described_result(video_id: str) -> VideoResult:
    """Two shots (the second with a thumbnail and a description), on-screen text, speech and
    frame image vectors: every view every sink reads."""
    made = make_result(video_id, frames=len(TEXTS), texts=TEXTS, embed=False, step_s=1.0)
    frames = list(made.frames)
    for frame, vector in zip(frames, unit_vectors(len(frames), 8), strict=True):
        frame.image_embedding = vector
    cut = ShotBoundary(3.0, "cut", 40.0, 3.0, 3.0)
    frames[3] = dataclasses.replace(
        frames[3], boundaries=(cut,), thumbnail=b"jpeg", description={"caption": "A shop"}
    )
    speech = Speech("done", (SpeechSegment(0.5, 2.0, "Open all day.", -0.2, 0.01, ()),))
    return dataclasses.replace(made, frames=frames, speech=speech)


def counting(monkeypatch: pytest.MonkeyPatch, calls: Counter[str], name: str) -> None:
    """Count the calls of ``sinks.views.<name>``, the real function still doing the work."""
    real: Callable[..., Any] = getattr(views, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(views, name, counted)


def test_one_write_through_the_line_up_derives_each_view_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: Counter[str] = Counter()
    for name in ("derive_views", "video_shots", "text_spans"):
        counting(monkeypatch, calls, name)
    clip = tmp_path / "clip"  # the image model only names its table: its config is enough
    clip.mkdir()
    (clip / "config.json").write_text("{}")
    storage = StorageSettings(lance_uri=str(tmp_path / "lance"), object_store_uri=str(tmp_path))
    lineup = sinks_from_settings(
        storage, text_model=E5Embedder(), image_model=ClipEmbedder(str(clip))
    )
    kinds = {type(sink) for sink in lineup}
    assert {ResultDocumentSink, LanceSegmentSink, LanceSearchIndex, LanceImageIndex} <= kinds
    with SinkWriter(lineup, batch_videos=2, flush_s=30.0) as writer:
        futures = [writer.submit(described_result(name)) for name in ("a", "b")]
        for future in futures:
            future.result(timeout=120)
        assert writer.stats.batches == 1  # both videos in one write
        assert calls == {"derive_views": 2, "video_shots": 2, "text_spans": 2}

        # Every sink got the views: the document, the segments, the search and image rows.
        by_type = {type(sink): sink for sink in lineup}
        documents = by_type[ResultDocumentSink]
        assert isinstance(documents, ResultDocumentSink)
        document = documents.read("default", "a", "v1")
        assert document is not None
        assert [shot["description"] for shot in document["shots"]] == [None, {"caption": "A shop"}]
        segments = by_type[LanceSegmentSink]
        assert isinstance(segments, LanceSegmentSink)
        kinds_written = {row["kind"] for row in segments.segment_rows("a")}
        assert kinds_written == {"shot", "description", "text", "speech"}
        search = by_type[LanceSearchIndex]
        assert isinstance(search, LanceSearchIndex)
        assert search.count_rows("a") == 4  # two text spans, the speech, the description
        images = by_type[LanceImageIndex]
        assert isinstance(images, LanceImageIndex)
        rows = images.table.rows(filter="video_id = 'a'")
        shots = sorted((row["frame_index"], row["shot"]) for row in rows)
        assert shots == [(0, None), (1, None), (2, None), (3, 1), (4, 1), (5, 1)]


def test_views_are_shared_within_a_scope_only() -> None:
    result = described_result("v")
    with shared_views():
        first = views_of(result)
        with shared_views():  # an inner scope shares the outer one's
            assert views_of(result) is first
        assert views_of(dataclasses.replace(result)) is not first  # another result object
    assert views_of(result) is not first  # outside a write: derived afresh
    assert views_of(result) == first
    assert [shot["thumbnail"] for shot in first.shots] == [
        None,
        views.thumbnail_key("default", "v", "v1", 3),
    ]
    assert first.shot_times == ((0.0, 3.0, None), (3.0, 6.0, first.shots[1]["thumbnail"]))
    assert [s["kind"] for s in first.segments] == [
        "shot", "shot", "description", "text", "text", "speech"
    ]  # fmt: skip


VIEW_NAMES = set(views.__all__) | {"shot_entries", "segments_of", "text_spans", "video_shots"}


def test_no_sink_takes_a_view_from_another_sink() -> None:
    """A view comes from ``sinks.views`` (the one module that derives them), never through
    another sink's module: that is how a view ends up derived once per sink."""
    taken = []
    for path in sorted(Path(sinks.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            if node.module.startswith("sinks.") and node.module != "sinks.views":
                taken += [
                    f"{path.name}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name in VIEW_NAMES
                ]
    assert taken == []
