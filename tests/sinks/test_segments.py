"""LanceSegmentSink: shots, text spans, speech and shot descriptions as rows of one table,
written by keyed upserts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.description import ShotDescription
from core.records import ShotBoundary, VideoResult
from core.speech import Speech, SpeechSegment, SpokenWord
from sinks.segments import LanceSegmentSink
from tests.sinks import make_result

CUT = ShotBoundary(2.9, "cut", 31.5, 2.9, 2.9)
TEXTS = ["OPEN", "OPEN", "OPEN", "", "", "", "SALE 50%", "SALE 50%"]


def result(video_id: str, version: str = "v1", *, cut: bool = True) -> VideoResult:
    made = make_result(video_id, frames=len(TEXTS), texts=TEXTS, version=version, embed=False)
    if not cut:
        return made
    frames = list(made.frames)
    frames[6] = dataclasses.replace(frames[6], boundaries=(CUT,))
    return dataclasses.replace(made, frames=frames)


def test_shots_and_spans_become_rows(tmp_path: Path) -> None:
    sink = LanceSegmentSink(str(tmp_path))
    sink.write([result("a"), result("b")])
    rows = sink.segment_rows("a")
    assert [(r["kind"], r["seq"], r["start_s"], r["end_s"], r["text"]) for r in rows] == [
        ("shot", 0, 0.0, 2.9, ""),
        ("text", 0, 0.0, 1.5, "OPEN"),
        ("shot", 1, 2.9, 4.0, ""),
        ("text", 1, 3.0, 4.0, "SALE 50%"),
    ]
    assert rows[2]["attributes"] == {
        "entered_by": "cut",
        "transition_s": None,
        "keyframe": 6,
        "thumbnail": None,
    }
    assert rows[1]["attributes"]["samples"] == 3
    assert {r["tenant"] for r in rows} == {"default"}
    assert len(sink.segment_rows("b", "shot")) == 2
    assert sink.table.count_rows() == 8


def test_rewriting_leaves_exactly_the_new_segments(tmp_path: Path) -> None:
    sink = LanceSegmentSink(str(tmp_path))
    sink.write([result("a")])
    sink.write([result("a")])  # the same result again: the same rows
    assert sink.table.count_rows() == 4
    sink.write([result("a", "v2", cut=False)])  # re-processed: one shot fewer
    rows = sink.segment_rows("a")
    assert [(r["kind"], r["seq"]) for r in rows] == [("shot", 0), ("text", 0), ("text", 1)]
    assert {r["pipeline_version"] for r in rows} == {"v2"}


def test_speech_and_shot_descriptions_become_rows(tmp_path: Path) -> None:
    word = SpokenWord("Open", 0.4, 0.8, 0.9)
    said = SpeechSegment(0.4, 1.9, "Open all day.", -0.2, 0.01, (word,))
    described = ShotDescription(
        caption="A shop sign on a sale day",
        tags=["shop"],
        objects=["sign"],
        on_screen_text="SALE 50%",
        scene_type="outdoor",
        safety=[],
    ).model_dump()
    made = result("talk")
    frames = list(made.frames)
    frames[6] = dataclasses.replace(frames[6], description=described, caption="A shop sign")
    speech = Speech("done", (said,), language="en", audio_s=4.0)
    LanceSegmentSink(str(tmp_path)).write([dataclasses.replace(made, frames=frames, speech=speech)])
    sink = LanceSegmentSink(str(tmp_path))
    (spoken,) = sink.segment_rows("talk", "speech")
    assert (spoken["start_s"], spoken["end_s"], spoken["text"]) == (0.4, 1.9, "Open all day.")
    assert spoken["attributes"]["language"] == "en"
    assert spoken["attributes"]["words"][0]["text"] == "Open"
    # The second shot's keyframe (sample 6) is described; the first shot has no description.
    (description,) = sink.segment_rows("talk", "description")
    assert (description["start_s"], description["end_s"]) == (2.9, 4.0)
    assert description["text"] == "A shop sign on a sale day"
    assert description["attributes"] == described
