"""What ``video.done`` says of the video stages that read a whole video: how many chapters,
and the start of the summary with its category and tags."""

from __future__ import annotations

import dataclasses

from core.outputs import VideoOutput
from runtime.messages import DONE_SUMMARY_CHARS, done_message_data
from tests.sinks import make_result

SUMMARY = {"summary": "s" * 500, "tags": ["bread", "tides"], "category": "education"}


def test_the_message_counts_the_chapters_and_starts_the_summary() -> None:
    result = make_result("vid-1", frames=2, embed=False)
    chapters = [
        {"start_s": float(i), "end_s": i + 1.0, "title": "t", "summary": ""} for i in range(3)
    ]
    outputs = {"chapters": VideoOutput({"chapters": chapters}), "summary": VideoOutput(SUMMARY)}
    data = done_message_data(dataclasses.replace(result, outputs=outputs))
    assert data["chapters"] == 3
    assert data["summary"] == {
        "text": "s" * DONE_SUMMARY_CHARS,
        "truncated": True,
        "category": "education",
        "tags": ["bread", "tides"],
    }


def test_stages_that_did_not_run_or_answer_are_null() -> None:
    result = make_result("vid-2", frames=2, embed=False)
    assert (done_message_data(result)["chapters"], done_message_data(result)["summary"]) == (
        None,
        None,
    )
    unanswered = {"summary": VideoOutput({"summary": None, "reason": "nothing said"})}
    assert done_message_data(dataclasses.replace(result, outputs=unanswered))["summary"] is None
