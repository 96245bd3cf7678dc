"""The summary stage with the llama.cpp engine and the packaged SmolLM2: schema-valid answers
from a result's chapters, labels, text and transcript; the prompt trimmed to the context and
the trimming recorded; no model call where there is nothing to summarise."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import jsonschema
import pytest

from core.config import SummarySettings
from core.outputs import VideoOutput
from core.records import VideoResult
from stages.summary import SummaryStage, answer_schema, material_of, trim
from tests.stages.test_chapters import talk

CHAPTERS = [
    {"start_s": 0.0, "end_s": 36.0, "title": "BAKING BREAD", "summary": "Knead the dough."},
    {"start_s": 36.0, "end_s": 72.0, "title": "OCEAN TIDES", "summary": "The moon pulls."},
]


def chaptered(result: VideoResult) -> VideoResult:
    outputs = {
        "chapters": VideoOutput({"chapters": CHAPTERS}),
        "shot_labels": VideoOutput({"labels": [{"name": "bakery", "score": 0.4}]}),
    }
    return dataclasses.replace(result, outputs=outputs)


@pytest.fixture(scope="module")
def stage() -> Iterator[SummaryStage]:
    built = SummaryStage(SummarySettings(enabled=True, second_language="zh"))
    built.setup()
    yield built
    built.teardown()


def test_the_answer_is_valid_in_its_schema_with_a_title_per_chapter(stage: SummaryStage) -> None:
    output = stage.analyse(chaptered(talk(["bread", "tides"])))
    data = dict(output.data)
    assert data.pop("language") == "en"
    assert data.pop("prompt") == {"trimmed": {}}
    jsonschema.validate(data, answer_schema(SummarySettings(second_language="zh"), chapters=2))
    assert len(data["chapter_titles"]) == 2
    assert data["category"] in SummarySettings().categories
    (segment,) = output.segments
    assert (segment.kind, segment.start_s, segment.end_s) == ("summary", 0.0, 72.0)
    assert segment.text == data["summary"]


def test_a_long_transcript_is_trimmed_to_the_context_and_the_cut_recorded() -> None:
    small = SummaryStage(SummarySettings(enabled=True, context_tokens=1024))
    small.setup()
    try:
        long = talk(["bread", "tides", "bikes", "volcanoes", "garden", "chess"] * 4)
        output = small.analyse(long)
    finally:
        small.teardown()
    trimmed = output.data["prompt"]["trimmed"]
    assert set(trimmed) == {"Transcript"}
    assert 0 < trimmed["Transcript"]["kept"] < trimmed["Transcript"]["of"]
    assert output.data["summary"]


def test_nothing_to_summarise_asks_no_model() -> None:
    silent = talk(["bread"])
    silent = dataclasses.replace(silent, speech=None)
    unloaded = SummaryStage(SummarySettings(enabled=True))  # not set up: a call would raise
    output = unloaded.analyse(silent)
    assert output.data == {"summary": None, "reason": "nothing said, shown or read"}
    assert output.segments == ()


def test_the_material_comes_most_telling_first_and_trims_from_the_end() -> None:
    material = material_of(chaptered(talk(["bread"])))
    assert [heading for heading, _ in material] == [
        "Chapters",
        "What is shown",
        "Text on screen",
        "Transcript",
    ]
    assert material[0][1] == "0 s: BAKING BREAD\n36 s: OCEAN TIDES"
    kept, trimmed = trim(material, 60)
    assert sum(len(text) for _, text in kept) == 60
    before = len(material[0][1]) + len("bakery")  # no text on screen in this talk
    assert trimmed["Transcript"] == {"kept": 60 - before, "of": len(material[3][1])}


def test_the_version_follows_the_model_schema_and_categories() -> None:
    base = SummaryStage(SummarySettings()).version_params()
    other = SummaryStage(SummarySettings(categories=("news", "other"))).version_params()
    assert base != other
    assert str(base["model"]).startswith("llamacpp:")
    assert base["schema"] == "summary/1"
