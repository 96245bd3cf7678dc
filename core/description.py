"""What a shot shows, as the VLM stage answers it: a versioned JSON schema.

The VLM does not write free text: its decoding is constrained to this schema (``models.
structured`` with the transformers engine, vLLM's structured outputs with vLLM), so every
answer parses, whatever the model. Each field is bounded (string lengths, list sizes) so a
complete answer always fits the token budget. Changing the schema changes
``DESCRIPTION_VERSION`` and, through the VLM stage's version, the pipeline version.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

DESCRIPTION_VERSION = 1

SceneType = Literal[
    "indoor", "outdoor", "studio", "screen_recording", "graphics", "document", "other"
]
SafetyLabel = Literal["violence", "weapons", "nudity", "drugs", "self_harm", "hate", "gore"]
Word = Annotated[str, StringConstraints(max_length=24)]

DESCRIPTION_PROMPT = (
    "Describe this video shot as JSON: a one-sentence caption, up to six tags, up to six "
    "visible objects, the text shown on screen, the kind of scene, and any safety concerns "
    "(an empty list when there are none)."
)


class ShotDescription(BaseModel):
    """A shot's structured description (schema version ``DESCRIPTION_VERSION``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    caption: str = Field(max_length=160, description="One sentence on what the shot shows.")
    tags: list[Word] = Field(max_length=6, description="Topics and themes.")
    objects: list[Word] = Field(max_length=6, description="Things visible in the shot.")
    on_screen_text: str = Field(max_length=120, description="Text shown in the picture.")
    scene_type: SceneType
    safety: list[SafetyLabel] = Field(
        max_length=7, description="Safety concerns seen; empty when there are none."
    )


@cache
def description_schema() -> dict[str, Any]:
    """The JSON schema the VLM's answers are constrained to."""
    return ShotDescription.model_json_schema()


def schema_digest() -> str:
    """12 hex digits over the schema and its version: part of the VLM stage's version."""
    blob = json.dumps(
        {"version": DESCRIPTION_VERSION, "schema": description_schema()}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def parse_description(text: str) -> ShotDescription:
    """The model's answer, validated; ``ValueError`` when it is not a valid description (an
    answer cut short by the token budget)."""
    return ShotDescription.model_validate_json(text)
