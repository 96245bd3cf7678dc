"""Speech records: a window's part and a video's speech as JSON, with and without audio
events (parts and documents stored before events load), and events of neighbouring windows
joined where they meet."""

from __future__ import annotations

import json

import pytest

from core.speech import AudioEvent, Speech, SpeechEnd, SpeechPart, SpeechSegment, joined_events

SAID = SpeechSegment(1.0, 2.5, "Please open the door.", -0.2, 0.01, (), "en", 0.97)


def part(index: int, start_s: float, end_s: float, *events: AudioEvent) -> SpeechPart:
    segments = (SAID,) if index == 0 else ()
    return SpeechPart("v", index, start_s, end_s, "en", 0.97, segments, 0.5, events)


def test_a_part_round_trips_with_and_without_events() -> None:
    plain = part(0, 0.0, 30.0)
    heard = part(1, 30.0, 60.0, AudioEvent("music", 30.0, 58.2, 0.99))
    for original in (plain, heard):
        assert SpeechPart.from_json(json.loads(json.dumps(original.to_json()))) == original


def test_a_part_stored_before_events_loads_without_any() -> None:
    stored = part(0, 0.0, 30.0).to_json()
    del stored["events"]
    assert SpeechPart.from_json(stored).events == ()


def test_speech_round_trips_and_old_documents_load() -> None:
    speech = Speech(
        "done",
        (SAID,),
        "en",
        30.0,
        events=(AudioEvent("speech", 0.9, 2.6, 0.95), AudioEvent("music", 3.0, 30.0, 0.9)),
    )
    raw = json.loads(json.dumps(speech.to_json()))
    assert raw["audio_events"][1] == {
        "kind": "music",
        "start_s": 3.0,
        "end_s": 30.0,
        "confidence": 0.9,
    }
    assert Speech.from_json(raw) == speech
    del raw["audio_events"]
    assert Speech.from_json(raw).events == ()


def test_an_unknown_event_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="applause"):
        AudioEvent.from_json({"kind": "applause", "start_s": 0, "end_s": 1, "confidence": 1})


def test_events_that_meet_at_a_window_end_are_joined() -> None:
    parts = [
        part(
            1, 30.0, 60.0, AudioEvent("music", 30.0, 60.0, 0.8), AudioEvent("speech", 31, 33, 0.9)
        ),
        part(0, 0.0, 30.0, AudioEvent("music", 20.0, 29.995, 1.0)),
        part(2, 60.0, 75.0, AudioEvent("music", 62.0, 70.0, 0.9)),  # after a pause of 2 s
    ]
    speech = Speech.assemble(parts, SpeechEnd("v", 3))
    assert speech.events == (
        AudioEvent("music", 20.0, 60.0, 0.85),  # weighted by length: 10 s of 1.0, 30 s of 0.8
        AudioEvent("speech", 31, 33, 0.9),
        AudioEvent("music", 62.0, 70.0, 0.9),
    )
    assert speech.event_seconds() == {"music": 48.0, "singing": 0.0, "speech": 2.0}


def test_kinds_are_joined_apart() -> None:
    events = [AudioEvent("singing", 5.0, 9.0, 0.7), AudioEvent("music", 0.0, 10.0, 0.9)]
    assert joined_events(events) == (events[1], events[0])  # in time order, none joined
