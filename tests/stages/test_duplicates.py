"""The duplicates stage on results (real Lance): a video without hashes looks nothing up,
``across_tenants`` widens the lookup to every tenant, and a library that cannot be read is an
outage the video's attempt is retried for, never a failed video."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import DuplicateSettings, ServiceConfig
from runtime.video_stages import VideoStages
from sinks.errors import SinkUnavailable
from sinks.fingerprints import LanceFingerprintSink
from stages.duplicates import DuplicatesStage
from tests.sinks import make_result
from tests.sinks.test_fingerprints import hashed, hashes


def stage_on(root: Path, **settings: object) -> DuplicatesStage:
    config = ServiceConfig.load(storage={"lance_uri": str(root / "lance")})
    return DuplicatesStage(DuplicateSettings.model_validate(settings), config.storage)


def test_a_video_without_hashes_finds_nothing(tmp_path: Path) -> None:
    output = stage_on(tmp_path).analyse(make_result("plain", frames=5, embed=False))
    assert output.data == {"fingerprint_samples": 0, "duplicates": []}


def test_across_tenants_finds_another_tenants_copy(tmp_path: Path) -> None:
    config = ServiceConfig.load(storage={"lance_uri": str(tmp_path / "lance")})
    values = hashes(7, 12)
    LanceFingerprintSink.from_settings(config.storage).write(
        [hashed("theirs", values, tenant="acme", step_s=1.0)]
    )
    mine = hashed("mine", values, tenant="other", step_s=1.0)
    assert stage_on(tmp_path).analyse(mine).data["duplicates"] == []
    (found,) = stage_on(tmp_path, across_tenants=True).analyse(mine).data["duplicates"]
    assert (found["video_id"], found["tenant"], found["score"]) == ("theirs", "acme", 1.0)
    assert found["spans"] == [
        {"start_s": 0.0, "end_s": 12.0, "other_start_s": 0.0, "other_end_s": 12.0}
    ]


async def test_a_library_that_cannot_be_read_is_an_outage(tmp_path: Path) -> None:
    (tmp_path / "lance").write_text("a file where the tables' folder should be")
    stages = VideoStages([stage_on(tmp_path)])

    async def advance(stage: str, done: int) -> None:
        pass

    result = hashed("video", hashes(8, 6), step_s=1.0)
    try:
        with pytest.raises(SinkUnavailable):
            await stages.run(result, {}, advance)
        (tmp_path / "lance").unlink()  # the store is back: the next attempt goes through
        done = await stages.run(result, {}, advance)
        assert done.outputs["duplicates"].data["duplicates"] == []
    finally:
        await stages.close()
