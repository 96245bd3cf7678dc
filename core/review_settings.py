"""Review labels (``stages.review``): what a platform's reviewers act on, scored per category
with its evidence, and a decision by thresholds per category (and per tenant)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ReviewCategory = Literal["contact", "qr", "terms", "visual"]
#: The categories, in the order the result lists them.
REVIEW_CATEGORIES: tuple[ReviewCategory, ...] = ("contact", "qr", "terms", "visual")
Decision = Literal["pass", "review", "block"]


class Thresholds(BaseModel):
    """Where a category's score (0 to 1) sends a video: to the review queue from ``review``,
    blocked from ``block`` (above 1: never blocked by this category)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    review: float = Field(default=0.5, ge=0, le=1)  # from this score: to the review queue
    block: float = Field(default=0.95, ge=0, le=1.01)  # from this score: blocked (above 1: never)

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if self.block < self.review:
            raise ValueError(f"block ({self.block}) is below review ({self.review})")
        return self

    def decide(self, score: float) -> Decision:
        if score >= self.block:
            return "block"
        return "review" if score >= self.review else "pass"


def _default_thresholds() -> dict[ReviewCategory, Thresholds]:
    return {category: Thresholds() for category in REVIEW_CATEGORIES}


class ReviewSettings(BaseModel):
    """Review labels with evidence (``stages.review``): contact details and links drawing users
    off the platform (in on-screen text and speech), QR codes in the frames, the operator's
    terms, and what a VLM flags; each category scored, each score with its evidence, and a
    decision ``pass``, ``review`` or ``block``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True  # False: no review labels, and no QR codes looked for
    # Look for QR codes in every sample that keeps its pixels (the ``qr`` frames stage).
    qr: bool = True
    # Per category: the score from which a video goes to review, and from which it is
    # blocked (``Thresholds``). A category left out keeps the defaults (0.5 and 0.95).
    thresholds: dict[ReviewCategory, Thresholds] = Field(default_factory=_default_thresholds)
    # Per tenant, over ``thresholds``: tenant -> category -> thresholds.
    tenant_thresholds: dict[str, dict[ReviewCategory, Thresholds]] = {}
    # A folder of term lists: ``<list>.txt``, one term a line (``#`` starts a comment), in any
    # language; matched in on-screen text, speech and descriptions after normalising width,
    # script (traditional as simplified), case and what stands between characters. A changed
    # file is read again without a restart. None: no terms.
    terms_dir: str | None = None
    terms_check_s: float = Field(default=5.0, ge=0)  # how often the lists are looked at
    # Visual detectors run on every sample that keeps its pixels (the ``detect`` frames
    # stage): ``faces`` (CenterFace; its faces are counted per shot, never a finding) and
    # those installed packages add (``reelsense.detectors`` entry points). Off by default:
    # ``faces`` costs about 73 CPU ms a 720p sample.
    detectors: tuple[str, ...] = ()
    face_threshold: float = Field(default=0.5, gt=0, le=1)  # the least score a face counts at
    # Which detectors' labels are ``visual`` findings: detector -> label -> weight (0 to 1);
    # a finding's confidence is the detection's score times its weight. A label left out is
    # only recorded with its sample, never a finding (so are faces).
    visual_labels: dict[str, dict[str, float]] = {}
    max_evidence: int = Field(default=20, ge=1)  # per category, the strongest first

    @model_validator(mode="after")
    def _weights(self) -> ReviewSettings:
        for detector, labels in self.visual_labels.items():
            for label, weight in labels.items():
                if not 0 < weight <= 1:
                    raise ValueError(f"visual_labels.{detector}.{label}: {weight} is not in (0, 1]")
        return self

    def thresholds_for(self, tenant: str, category: ReviewCategory) -> Thresholds:
        own = self.tenant_thresholds.get(tenant, {})
        return own.get(category) or self.thresholds.get(category) or Thresholds()
