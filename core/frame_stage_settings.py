"""The settings of the stages that read each sample, each a section of ``stages``: the text
on screen (``stages.ocr``), the text embedder (``stages.embed``), the VLM (``stages.vlm``) and
the image embedder (``stages.image_embed``).

Until this release they were flat fields of ``stages`` (``stages.ocr_min_score``); those names
are still read for one release (``core.settings_renames``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.description import DESCRIPTION_PROMPT


class OcrSettings(BaseModel):
    """The text on screen (``stages.ocr``): lines read by RapidOCR in each analysed sample."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    det_limit_side: int = 640
    min_score: float = 0.5
    threads: int = 1


class EmbedSettings(BaseModel):
    """The text embedder (``stages.embed``): the vectors search compares, of each frame's
    text, of speech and of each query; chapters compare text with it too."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # use-multilingual-v3 (16 languages, numpy) or multilingual-e5-small (about 100, a C
    # engine), both bundled; all-MiniLM-L6-v2 (English; the ``st`` extra) or a
    # sentence-transformers model folder. See the README's search figures.
    model: str = "use-multilingual-v3"
    threads: int = 1


class VlmSettings(BaseModel):
    """A vision-language model (``stages.vlm``): each shot's keyframe described in a JSON
    schema, or each sample captioned. Off unless ``model`` is set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None  # off unless configured: a path or model id
    engine: Literal["transformers", "vllm"] = "transformers"
    # description: an answer in the JSON schema of ``core.description``, by constrained
    # decoding; caption: one sentence of free text.
    output: Literal["description", "caption"] = "description"
    # shots: the first sample of each shot (every sample when shot detection is off);
    # samples: every sample analysed.
    scope: Literal["shots", "samples"] = "shots"
    prompt: str = "Describe this video frame in one sentence."  # captions
    description_prompt: str = DESCRIPTION_PROMPT
    max_new_tokens: int = 32  # captions
    # Enough for any answer a real model gives (tens of tokens); one cut short is recorded
    # as no description.
    description_max_tokens: int = Field(default=512, ge=64)
    # Pixels per frame the VLM sees (Qwen2-VL resizes to fit); None keeps the model's default.
    max_pixels: int | None = Field(default=None, ge=28 * 28 * 4)
    batch_size: int = Field(default=8, ge=1)  # frames per generate call (transformers engine)
    threads: int = Field(default=1, ge=1)  # torch CPU threads (transformers engine)


class ImageEmbedSettings(BaseModel):
    """The image embedder (``stages.image_embed``): a vector per analysed frame from its
    pixels. Off unless ``model`` is set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # A CLIP or SigLIP folder (transformers ``save_pretrained``): a vector per analysed frame
    # from its pixels, so frames without text are found by a text query. Off unless set.
    model: str | None = None
    batch_size: int = Field(default=16, ge=1)  # frames per forward pass
    threads: int = Field(default=1, ge=1)  # torch CPU threads
