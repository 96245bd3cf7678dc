"""A video's summary, tags and category, written by a language model from what was found.

The prompt is built from the stored result (nothing is decoded): the chapters, what the shots
show (``shot_labels``), the text on screen and the transcript, each trimmed to fit the model's
context (what was cut is recorded with the answer). The model answers in a JSON schema under
constrained decoding (``models.llm``): a summary in the video's language (and in
``second_language``, where set), up to ``max_tags`` tags, one category of the operator's list,
and a title per chapter. The summary is a searchable segment of kind ``summary``.

An answer the model cannot give (cut at its token budget, a prompt that cannot be made to fit)
is recorded in the output with its reason; the video's other findings stand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.config import ServiceConfig, SummarySettings
from core.errors import ReelsenseError
from core.outputs import OutputSegment, VideoOutput
from core.records import VideoResult
from core.spans import text_spans
from core.stage_names import CHAPTERS, SHOT_LABELS, SUMMARY
from models.llm import ContextExceeded, LlamaCppModel
from stages.base import VideoStage, WithEngine
from stages.chapters import chapters_of

#: The answer's schema: a new one gives the stage a new version.
SCHEMA_VERSION = "summary/1"
#: Characters a token holds at least, for the prompt's budget (English about 4, Chinese 1-2:
#: a prompt still too long is cut by half, and tried again).
_CHARS_PER_TOKEN = 3
_TEMPLATE_TOKENS = 96  # the instructions and the chat template around the material
_TRIES = 3
MAX_TITLED = 12  # chapters the model gives titles for, at most
_ROLE = "You describe videos for a video platform, in JSON."
_LANGUAGES = {
    "en": "English",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
    "es": "Spanish",
    "fr": "French",
    "de": "German",
    "pt": "Portuguese",
    "ru": "Russian",
    "ar": "Arabic",
    "hi": "Hindi",
    "it": "Italian",
}


class SummaryStage(WithEngine[LlamaCppModel], VideoStage):
    """The video's summary, tags, category and chapter titles."""

    name = SUMMARY
    reads = ("speech", "ocr_lines", CHAPTERS, SHOT_LABELS)
    segment_kinds = ("summary",)
    searchable = ("summary",)

    def __init__(self, settings: SummarySettings) -> None:
        self._settings = settings

    @classmethod
    def build(cls, config: ServiceConfig) -> SummaryStage | None:
        settings = config.stages.summary
        return cls(settings) if settings.enabled else None

    def new_engine(self) -> LlamaCppModel:
        settings = self._settings
        return LlamaCppModel(
            settings.model, threads=settings.threads, context_tokens=settings.context_tokens
        )

    def version_params(self) -> Mapping[str, object]:
        return {
            **self._settings.model_dump(exclude={"enabled", "threads", "model"}),
            "model": self.new_engine().model_id,
            "schema": SCHEMA_VERSION,
        }

    def analyse(self, result: VideoResult) -> VideoOutput:
        material = material_of(result)
        language = (result.speech.language if result.speech else None) or "en"
        if not any(text for _, text in material):
            return VideoOutput({"summary": None, "reason": "nothing said, shown or read"})
        chapters = len(chapters_of(result) or [])
        schema = answer_schema(self._settings, chapters)
        answer_budget = answer_tokens(self._settings, chapters)
        budget = self._settings.context_tokens - answer_budget
        budget = (budget - _TEMPLATE_TOKENS) * _CHARS_PER_TOKEN
        for _ in range(_TRIES):
            kept, trimmed = trim(material, budget)
            messages = self.messages(kept, language, chapters)
            try:
                answer = self.engine.answer(messages, schema, answer_budget)
            except ContextExceeded:
                budget //= 2
                continue
            except ReelsenseError as exc:
                return VideoOutput({"summary": None, "reason": f"{exc.code}: {exc}"})
            data = {**answer, "language": language, "prompt": {"trimmed": trimmed}}
            segment = OutputSegment(
                "summary",
                0.0,
                max(result.probe.duration_s, 0.0),
                str(answer["summary"]),
                {"tags": answer["tags"], "category": answer["category"]},
            )
            return VideoOutput(data, (segment,))
        return VideoOutput({"summary": None, "reason": "the prompt does not fit the context"})

    def messages(
        self, material: Sequence[tuple[str, str]], language: str, chapters: int
    ) -> list[dict[str, str]]:
        """The chat: what the model is asked, then what was found in the video."""
        settings = self._settings
        asks = [
            f"Summarise the video in {_LANGUAGES.get(language, language)}, in at most "
            f"{settings.summary_chars} characters.",
            f"Give up to {settings.max_tags} short topic tags, and one category of: "
            f"{', '.join(settings.categories)}.",
        ]
        if settings.second_language:
            name = _LANGUAGES.get(settings.second_language, settings.second_language)
            asks.append(f"Also give the summary in {name} as summary_second.")
        if titled(chapters):
            asks.append(f"Give a short title for each of the {chapters} chapters, in order.")
        found = "\n\n".join(f"{heading}:\n{text}" for heading, text in material if text)
        # The material first and the task last: small models follow what they read last.
        return [
            {"role": "system", "content": _ROLE},
            {"role": "user", "content": f"{found}\n\n{' '.join(asks)}"},
        ]


def material_of(result: VideoResult) -> list[tuple[str, str]]:
    """What the prompt tells of the video, most telling first: its chapters, what it shows,
    the text on screen, the transcript."""
    chapters = "\n".join(f"{c['start_s']:.0f} s: {c['title']}" for c in chapters_of(result) or [])
    labels_output = result.outputs.get(SHOT_LABELS)
    labels = labels_output.data.get("labels", []) if labels_output else []
    shown = ", ".join(str(label["name"]) for label in labels)
    on_screen = "\n".join(dict.fromkeys(span.text for span in text_spans(result.frames)))
    said = " ".join(s.text.strip() for s in result.speech.segments) if result.speech else ""
    return [
        ("Chapters", chapters),
        ("What is shown", shown),
        ("Text on screen", on_screen),
        ("Transcript", said),
    ]


def trim(
    material: Sequence[tuple[str, str]], budget: int
) -> tuple[list[tuple[str, str]], dict[str, dict[str, int]]]:
    """``material`` within ``budget`` characters, the first parts first, each cut at its end;
    and, for each part cut, how much of it was kept of how much."""
    kept: list[tuple[str, str]] = []
    trimmed: dict[str, dict[str, int]] = {}
    left = max(budget, 0)
    for heading, text in material:
        part = text[:left]
        if len(part) < len(text):
            trimmed[heading] = {"kept": len(part), "of": len(text)}
        kept.append((heading, part))
        left -= len(part)
    return kept, trimmed


def answer_schema(settings: SummarySettings, chapters: int) -> dict[str, Any]:
    """The JSON schema the answer is written in: every string and list bounded, so that a
    whole answer fits ``answer_tokens``."""
    text = {"type": "string", "minLength": 1, "maxLength": settings.summary_chars}
    properties: dict[str, Any] = {
        "summary": text,
        "tags": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": settings.tag_chars},
            "minItems": min(1, settings.max_tags),  # small models leave the list empty else
            "maxItems": settings.max_tags,
        },
        "category": {"type": "string", "enum": list(settings.categories)},
    }
    if settings.second_language:
        properties["summary_second"] = text
    if titled(chapters):
        properties["chapter_titles"] = {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": settings.title_chars},
            "minItems": titled(chapters),
            "maxItems": titled(chapters),
        }
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def answer_tokens(settings: SummarySettings, chapters: int) -> int:
    """The answer's token budget: every bounded string at its longest, at a token a
    character (near a string's bound the grammar may let the model write a character a
    token), and the structure around them. A whole answer never needs more; the model stops
    where its JSON ends."""
    summaries = settings.summary_chars * (2 if settings.second_language else 1)
    tags = settings.max_tags * (settings.tag_chars + 4)
    titles = titled(chapters) * (settings.title_chars + 4)
    longest = max(settings.categories, key=len)
    return summaries + tags + titles + len(longest) + 32


def titled(chapters: int) -> int:
    """How many chapters the model titles: all of two to ``MAX_TITLED``, else none (one
    chapter is the video; more would take the answer's budget from the summary)."""
    return chapters if 2 <= chapters <= MAX_TITLED else 0
