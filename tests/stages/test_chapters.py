"""The chapters stage on results whose topics are known, with the real text embedder."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import pytest

from bench.chapters import TOPICS
from core.config import ChapterSettings, StageSettings
from core.records import Frame, OcrLine, ProbeInfo, ShotBoundary, VideoRef, VideoResult
from core.speech import Speech, SpeechSegment
from stages.chapters import ChaptersStage

SLIDE_S = 12.0
EMBEDDER = StageSettings().embed.model  # the one search uses
BOX = ((10.0, 10.0), (200.0, 10.0), (200.0, 40.0), (10.0, 40.0))


@pytest.fixture(scope="module", params=[EMBEDDER, "multilingual-e5-small"])
def stage(request: pytest.FixtureRequest) -> Iterator[ChaptersStage]:
    built = ChaptersStage(ChapterSettings(), request.param)
    built.setup()
    yield built
    built.teardown()


def talk(topics: Sequence[str], *, titles: bool = False) -> VideoResult:
    """A result as the stages would give for a talk on ``topics``, 36 s each: six sentences
    of 4 s every 6 s, a cut every 12 s; ``titles``: each topic's title on screen all along."""
    segments: list[SpeechSegment] = []
    frames: list[Frame] = []
    for t, name in enumerate(topics):
        title, _, sentences = TOPICS[name]
        for i, sentence in enumerate(sentences):
            start = 36.0 * t + 1.0 + 6.0 * i
            segments.append(SpeechSegment(start, start + 4.0, sentence, -0.2, 0.01))
        for second in range(36):
            at = 36.0 * t + second
            cut = at > 0 and at % SLIDE_S == 0
            boundary = (ShotBoundary(at, "cut", 80.0, at, at),) if cut else ()
            lines = [OcrLine(title, 0.95, BOX)] if titles else []
            frames.append(Frame(len(frames), at, None, ocr_lines=lines, boundaries=boundary))
    duration = 36.0 * len(topics)
    probe = ProbeInfo("mp4", "h264", 320, 180, 25.0, duration, len(frames), 0, 1000)
    speech = Speech("done", tuple(segments), language="en", audio_s=duration)
    return VideoResult(
        VideoRef("talk", "file:///talk.mp4"), "v1", probe, frames, datetime.now(UTC), speech=speech
    )


def starts(output_data: dict[str, object]) -> list[float]:
    chapters = output_data["chapters"]
    assert isinstance(chapters, list)
    return [c["start_s"] for c in chapters]


def test_a_chapter_starts_where_the_spoken_topic_changes(stage: ChaptersStage) -> None:
    output = stage.analyse(talk(["bread", "tides", "bikes"]))
    assert starts(output.data) == [0.0, pytest.approx(36.0, abs=3), pytest.approx(72.0, abs=3)]
    chapters = output.data["chapters"]
    assert chapters[-1]["end_s"] == 108.0
    # No text on screen: the title is the chapter's first sentence, cut to title_words.
    assert chapters[1]["title"].startswith("The tides are pulled by the gravity")
    assert chapters[1]["title"].endswith("…")
    assert chapters[2]["summary"] in TOPICS["bikes"][2]
    assert [s.kind for s in output.segments] == ["chapter"] * 3
    assert output.segments[1].text.startswith(chapters[1]["title"])


def test_the_title_is_the_text_on_screen(stage: ChaptersStage) -> None:
    output = stage.analyse(talk(["volcanoes", "garden", "chess"], titles=True))
    chapters = output.data["chapters"]
    assert [c["title"] for c in chapters] == ["VOLCANOES", "GROWING TOMATOES", "LEARNING CHESS"]
    assert starts(output.data)[1:] == [pytest.approx(36.0, abs=3), pytest.approx(72.0, abs=3)]


def test_one_topic_is_one_chapter_whatever_the_cuts_and_pauses(stage: ChaptersStage) -> None:
    output = stage.analyse(talk(["chess"]))
    assert starts(output.data) == [0.0]
    assert output.data["chapters"][0]["end_s"] == 36.0


@pytest.mark.parametrize("shortest", [40.0, 55.0])
def test_no_chapter_is_shorter_than_min_chapter_s(shortest: float) -> None:
    longer = ChaptersStage(ChapterSettings(min_chapter_s=shortest), EMBEDDER)
    longer.setup()
    try:
        chapters = longer.analyse(talk(["bread", "tides", "bikes"])).data["chapters"]
    finally:
        longer.teardown()
    assert all(c["end_s"] - c["start_s"] >= shortest for c in chapters), chapters
    assert len(chapters) == (2 if shortest == 40.0 else 1)  # 108 s holds two of 40 s


def test_a_video_without_text_has_no_chapters(stage: ChaptersStage) -> None:
    silent = talk(["bread", "tides"])
    silent = VideoResult(
        silent.ref, silent.pipeline_version, silent.probe, silent.frames, silent.completed_at
    )
    output = stage.analyse(silent)
    assert output.data == {"chapters": []}
    assert output.segments == ()


def test_the_version_follows_the_settings_and_the_embedder() -> None:
    base = ChaptersStage(ChapterSettings(), EMBEDDER).version_params()
    other = ChaptersStage(ChapterSettings(min_depth=0.3), EMBEDDER)
    assert other.version_params() != base
    assert "enabled" not in base
    assert base["model"]
