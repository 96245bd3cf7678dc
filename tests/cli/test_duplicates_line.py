"""How ``reelsense result`` and the demo print the re-uploads a video copies."""

from __future__ import annotations

from typing import Any

from devkit.result_view import duplicates_line, stage_lines


def body(found: list[dict[str, Any]]) -> dict[str, Any]:
    data = {"fingerprint_samples": 30, "duplicates": found}
    return {"outputs": {"duplicates": {"data": data, "segments": []}}}


def test_each_original_is_printed_with_its_score_and_spans() -> None:
    span = {"start_s": 0.0, "end_s": 30.0, "other_start_s": 15.0, "other_end_s": 45.0}
    found = [{"video_id": "original", "score": 0.97, "mirrored": True, "spans": [span]}]
    line = duplicates_line(body(found))
    assert line is not None
    assert line.plain == "re-upload of: original 0.97, mirrored (0:00.0–0:30.0 = 0:15.0–0:45.0)"


def test_none_found_and_a_stage_that_did_not_run() -> None:
    line = duplicates_line(body([]))
    assert line is not None
    assert line.plain == "re-uploads: none found (30 samples)"
    assert duplicates_line({"outputs": {}}) is None
    assert stage_lines({}) == []
    assert [str(text) for text in stage_lines(body([]))] == [line.plain]
