"""reindex: a new text model's search table filled from the stored segments, with the rows
the service would write, without decoding or analysing anything."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from cli.main import main as cli_main
from core.records import ShotBoundary, VideoResult
from core.search import SearchFilter
from core.speech import Speech, SpeechSegment
from models.embedding import E5Embedder, UseEmbedder
from sinks.reindex import reindex
from sinks.search import LanceSearchIndex
from sinks.segments import LanceSegmentSink
from stages.sampling import thumbnail
from tests.sinks import make_result

TEXTS = ["欢迎光临"] * 3 + ["SERVER ROOM B7"] * 3


def result(video_id: str, tenant: str = "default") -> VideoResult:
    made = make_result(video_id, frames=len(TEXTS), texts=TEXTS, tenant=tenant, embed=False)
    frames = list(made.frames)
    image = np.full((90, 160, 3), 80, dtype=np.uint8)
    frames[0] = dataclasses.replace(frames[0], thumbnail=thumbnail(image, 160))
    frames[3] = dataclasses.replace(frames[3], boundaries=(ShotBoundary(1.5, "cut", 40, 1.5, 1.5),))
    said = SpeechSegment(0.1, 1.2, "Welcome to our shop.", -0.2, 0.01)
    return dataclasses.replace(made, frames=frames, speech=Speech("done", (said,), language="en"))


def test_a_new_model_gets_the_same_rows_from_the_stored_segments(tmp_path: Path) -> None:
    root = str(tmp_path / "lance")
    results = [result("shop"), result("other", tenant="acme")]
    LanceSegmentSink(root).write(results)
    old = LanceSearchIndex(root, E5Embedder())
    old.open()
    old.write(results)  # what the service wrote under the old model

    new = LanceSearchIndex(root, UseEmbedder())
    assert new.table.name != old.table.name
    new.write([result("shop")])  # the service has written one video under the new model
    done = reindex(new, LanceSegmentSink(root), batch_videos=1)
    new.refresh()
    assert (done.videos, done.skipped, done.rows) == (1, 1, 3)

    def rows(index: LanceSearchIndex) -> list[tuple[object, ...]]:
        columns = ["video_id", "tenant", "segment", "start_s", "end_s", "text", "shot"]
        found = index.table.rows(columns=[*columns, "partial"])
        return sorted(tuple(row.values()) for row in found)

    assert rows(new) == rows(old)  # keys, spans, shots with thumbnails, tenants
    (hit,) = new.search("welcome", k=1, where=SearchFilter(tenant="acme"))
    assert (hit.video_id, hit.shot) == ("other", 0)
    again = reindex(new, LanceSegmentSink(root))
    assert (again.videos, again.skipped) == (0, 2)
    old.close()
    new.close()


def test_reindex_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "lance"
    LanceSegmentSink(str(root)).write([result("shop")])
    config = tmp_path / "service.yaml"
    storage = {"lance_uri": str(root), "object_store_uri": str(tmp_path / "objects")}
    config.write_text(
        yaml.safe_dump({"storage": storage, "stages": {"embed": {"model": "use-multilingual-v3"}}})
    )
    assert cli_main(["reindex", "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert "search_use_multilingual_v3" in printed
    assert "1 videos (3 segments) written, 0 already there" in printed
    index = LanceSearchIndex(str(root), UseEmbedder())
    assert index.search("server room", k=1, method="text")[0].text == "SERVER ROOM B7"
