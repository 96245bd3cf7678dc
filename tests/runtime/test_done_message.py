"""What ``video.done`` says of the video stages that read a whole video: how many chapters,
and the start of the summary with its category and tags; and of the audio events, only how
long music and singing sound."""

from __future__ import annotations

import dataclasses

from core.outputs import VideoOutput
from core.speech import AudioEvent, Speech
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


def test_the_message_totals_the_music_and_singing_without_listing_them() -> None:
    events = tuple(AudioEvent("music", 10.0 * i, 10.0 * i + 8.5, 0.9) for i in range(50))
    sung = (AudioEvent("singing", 40.0, 55.0, 0.8), AudioEvent("speech", 0.0, 5.0, 0.9))
    speech = Speech("done", (), audio_s=500.0, events=events + sung)
    result = dataclasses.replace(make_result("vid-3", frames=2, embed=False), speech=speech)
    summary = done_message_data(result)["speech"]
    assert summary["audio_events"] == {"music_s": 425.0, "singing_s": 15.0}
    assert "AudioEvent" not in repr(summary)
    assert done_message_data(make_result("vid-4", frames=2, embed=False))["speech"] is None


def test_the_message_lists_the_videos_copied_with_their_spans() -> None:
    result = make_result("copy", frames=2, embed=False)
    assert done_message_data(result)["duplicates"] is None  # the stage did not run
    span = {"start_s": 0.0, "end_s": 30.0, "other_start_s": 15.0, "other_end_s": 45.0}
    found = {
        "video_id": "original",
        "tenant": "default",
        "score": 0.97,
        "mirrored": False,
        "speed": 1.0,
        "spans": [span],
    }
    output = VideoOutput({"fingerprint_samples": 30, "duplicates": [found]})
    data = done_message_data(dataclasses.replace(result, outputs={"duplicates": output}))
    assert data["duplicates"] == [
        {"video_id": "original", "score": 0.97, "mirrored": False, "spans": [span]}
    ]
