"""Speech in its own language with the bundled Whisper base: each segment marked with the
language it was decoded in, a window that switches language decoded side by side, a language
named by a setting (per tenant too), and windows that end in a pause rather than in a word.
Speech by espeak-ng, whose German and Spanish voices Whisper base understands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.quality.languages import mandarin_errors
from core.config import AsrSettings, LimitSettings
from core.records import LocalVideo, VideoRef
from core.speech import SpeechPart, heard
from devkit.recorded_speech import mandarin_clip
from devkit.speech_videos import espeak_path, read_audio, synthesize, write_speech_video
from models.asr import AsrEngine
from stages.audio import SAMPLE_RATE, audio_windows
from stages.fetch import probe_video
from stages.speech import SpeechStage

pytestmark = pytest.mark.skipif(espeak_path() is None, reason="espeak-ng is not installed")

GERMAN = "Der Bericht zeigt ein Wachstum in allen Regionen. Unser Team stellt den Plan vor."
ENGLISH = "The quarterly report shows growth in every region. Please send your questions."
SPANISH = (
    "El informe muestra un crecimiento en todas las regiones. "
    "Nuestro equipo presentará el plan la próxima semana."
)


@pytest.fixture(scope="module")
def base() -> Iterator[AsrEngine]:
    engine = AsrEngine(model="base")
    engine.load()
    yield engine
    engine.close()


def said(text: str, voice: str, folder: Path) -> np.ndarray:
    wav = synthesize(text, folder / f"{voice}.wav", voice)
    return read_audio(wav, SAMPLE_RATE)[0]


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SAMPLE_RATE), np.float32)


def test_each_segment_carries_the_language_of_its_side_of_the_window(
    base: AsrEngine, tmp_path: Path
) -> None:
    german, english = said(GERMAN, "de", tmp_path), said(ENGLISH, "en-us", tmp_path)
    audio = np.concatenate([silence(0.5), german, silence(1.5), english, silence(0.5)])
    switch_s = 20.0 + (0.5 + len(german) / SAMPLE_RATE + 0.75)

    transcript = base.transcribe(audio, 20.0)

    before = [s for s in transcript.segments if s.end_s <= switch_s]
    after = [s for s in transcript.segments if s.start_s >= switch_s]
    assert before
    assert after
    assert len(before) + len(after) == len(transcript.segments)
    assert {s.language for s in before} == {"de"}
    assert {s.language for s in after} == {"en"}
    assert all(0.5 < (s.language_probability or 0) <= 1 for s in transcript.segments)
    assert "questions" in " ".join(s.text for s in after).lower()
    assert "team" in " ".join(s.text for s in before).lower()


def test_one_language_throughout_is_decoded_once(base: AsrEngine, tmp_path: Path) -> None:
    english = said(ENGLISH, "en-us", tmp_path)
    transcript = base.transcribe(np.concatenate([english, silence(1.5), english]))
    assert transcript.language == "en"
    assert {s.language for s in transcript.segments} == {"en"}
    assert transcript.text.lower().count("questions") == 2


def test_a_named_language_is_decoded_without_detection(base: AsrEngine, tmp_path: Path) -> None:
    spanish = said(SPANISH, "es", tmp_path)
    detected = base.transcribe(spanish)
    assert detected.language == "es"
    named = base.transcribe(spanish, language="es")
    assert {(s.language, s.language_probability) for s in named.segments} == {("es", 1.0)}


def test_a_tenants_language_is_named_for_its_videos_only(tmp_path: Path) -> None:
    truth = write_speech_video(
        tmp_path / "es.mp4", [(0.5, SPANISH)], seconds=8.0, workdir=tmp_path, voice="es"
    )
    probe = probe_video(truth.path, LimitSettings())
    settings = AsrSettings(model="base", tenant_languages={"acme": "en"})
    stage = SpeechStage(settings, LimitSettings())

    def heard_for(tenant: str) -> set[tuple[str | None, float | None]]:
        ref = VideoRef(f"es-{tenant}", truth.path.as_uri(), tenant=tenant)
        speech = heard(stage.stream(LocalVideo(ref, str(truth.path), probe)))
        return {(s.language, s.language_probability) for s in speech.segments}

    assert heard_for("acme") == {("en", 1.0)}  # named: decoded as English, however it sounds
    (language, probability), *_ = heard_for("other")
    assert language == "es"
    assert probability is not None
    assert probability < 1.0
    assert stage.version_params()["tenant_languages"] == {"acme": "en"}
    stage.teardown()


def test_a_window_ends_in_a_pause_not_in_a_sentence(tmp_path: Path) -> None:
    # The third sentence runs across 10 s, where a window of 10 s would end, and through
    # the whole of the last 2 s before it.
    script = [
        (0.3, "Welcome to the weekly update."),
        (3.0, "Sales grew in the north."),
        (7.0, "The new office opens on the first of March next year, in the city centre."),
        (13.5, "Thank you all."),
    ]
    truth = write_speech_video(tmp_path / "talk.mp4", script, seconds=16.0, workdir=tmp_path)
    across = truth.utterances[2]
    assert across.start_s < 10.0 < across.end_s
    finder = AsrEngine(model="tiny.en").speech_spans  # Silero VAD: no Whisper loaded

    windows = list(audio_windows(truth.path, window_s=10.0, speech=finder))
    first_end = windows[0].end_s
    assert truth.utterances[1].end_s <= first_end <= across.start_s + 0.2  # in the pause
    assert windows[1].start_s == pytest.approx(first_end)

    quiet = list(audio_windows(truth.path, window_s=10.0))  # without a finder: in the word
    assert across.start_s + 0.2 < quiet[0].end_s < across.end_s


def test_no_word_of_a_sentence_across_a_window_end_is_lost(tmp_path: Path) -> None:
    script = [
        (0.3, "Welcome to the weekly update."),
        (3.2, "Sales grew in the north."),
        (8.4, "The new office opens on the first of March next year."),
    ]
    truth = write_speech_video(tmp_path / "talk.mp4", script, seconds=13.0, workdir=tmp_path)
    probe = probe_video(truth.path, LimitSettings())
    stage = SpeechStage(AsrSettings(model="tiny.en", window_s=10.0), LimitSettings())
    items = list(
        stage.stream(LocalVideo(VideoRef("talk", truth.path.as_uri()), str(truth.path), probe))
    )
    assert sum(isinstance(item, SpeechPart) for item in items) == 2
    text = heard(items).text.lower()
    for word in ("office", "opens", "first", "march", "next", "year"):
        assert word in text
    stage.teardown()


def test_recorded_mandarin_is_heard_as_mandarin(base: AsrEngine) -> None:
    clip = mandarin_clip()
    if clip is None:
        pytest.skip("the Mandarin clip was not fetched (python -m devkit.recorded_speech)")
    samples = read_audio(clip, SAMPLE_RATE)[0]
    detected = base.transcribe(samples)
    assert detected.language == "zh"
    # Character error rate against the sentence in the script it was written in (measured:
    # none wrong, in traditional characters).
    assert mandarin_errors(detected.text) <= 0.2
    named = base.transcribe(samples, language="zh")
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in named.text) >= 15


def test_an_unsure_window_in_one_language_is_not_split_into_another(
    base: AsrEngine, tmp_path: Path
) -> None:
    german = said(GERMAN, "de", tmp_path)
    more = said("Die Kunden sind sehr zufrieden. Wir danken allen Mitarbeitern.", "de", tmp_path)
    transcript = base.transcribe(np.concatenate([german, silence(1.2), more, silence(0.8)]))
    assert {s.language for s in transcript.segments} == {"de"}
    text = transcript.text.lower()
    assert "team" in text
    assert "kunden" in text
