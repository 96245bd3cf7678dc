"""The stages' names: the one place they are spelled (config, stages, pools, progress, timings)."""

from __future__ import annotations

from typing import Final

FETCH: Final = "fetch"
DECODE: Final = "decode"
OCR: Final = "ocr"
LABELS: Final = "labels"  # ImageNet classes per sample
QR: Final = "qr"  # the QR codes in each sample, decoded
FINGERPRINT: Final = "fingerprint"  # a perceptual hash of each sample
DETECT: Final = "detect"  # faces and what plug-in detectors find in each sample, for review
VLM: Final = "vlm"
IMAGE_EMBED: Final = "image_embed"  # a vector per frame from its pixels
EMBED: Final = "embed"
SPEECH: Final = "speech"  # the audio track, beside the frames
SHOT_LABELS: Final = "shot_labels"  # once per video: each shot's labels, from ``labels``
CHAPTERS: Final = "chapters"  # once per video: where the topic changes, from its text
SUMMARY: Final = "summary"  # once per video: a summary, tags and a category, by a language model
REVIEW: Final = "review"  # once per video: review labels with evidence, and a decision
DUPLICATES: Final = "duplicates"  # once per video: the library's videos it copies, and where

#: Every stage, in pipeline order.
ALL: Final = (
    FETCH,
    DECODE,
    OCR,
    LABELS,
    QR,
    FINGERPRINT,
    DETECT,
    VLM,
    IMAGE_EMBED,
    EMBED,
    SPEECH,
    SHOT_LABELS,
    CHAPTERS,
    SUMMARY,
    REVIEW,
    DUPLICATES,
)
#: The stages that may run inside the decode replicas (``PoolSettings.fuse``): those whose
#: ``Stage.fusion`` says so (a test holds the two together; ``core`` does not read the stages).
FUSABLE: Final = (OCR, LABELS, QR, FINGERPRINT, DETECT, VLM, IMAGE_EMBED, EMBED)
