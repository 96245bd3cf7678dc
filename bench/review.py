"""Review labels against short videos whose contact details, QR codes and terms are known.

    python -m bench.review [--json OUT] [--workdir DIR] [--quick]

About 40 videos of 4 to 6 s (``bench.review_cases``): Chinese and international phone numbers
in several spellings, WeChat and QQ ids, links, domains and e-mail addresses on screen; phone
numbers and links said in English; QR codes holding a link or plain text; the operator's terms
on screen (simplified, traditional, spaced) and said; and clean videos of prices, dates, order
numbers, times, versions, file names and ordinary sentences, shown and said. They run through
the real stages (decode, OCR, the ``qr`` stage, speech recognition with Whisper base, the
``review`` stage) with the sequential runner. A video counts as flagged in a category when the
category's decision is not ``pass``; each category is scored for precision and recall against
what each case holds, and the contact category's recall also by where the contact was (on
screen, in speech, in a QR code).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.review_cases import PLACES, SIZE, Case, cases, write_cases, write_terms
from bench.runs import corpus_main
from core.config import AsrSettings, ServiceConfig
from core.records import VideoRef, VideoResult
from core.stage_names import QR, REVIEW
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner

#: The categories scored (``visual`` needs a VLM, which does not run here).
SCORED = ("contact", "qr", "terms")


def flagged(review: Mapping[str, Any]) -> frozenset[str]:
    """The scored categories whose decision is not ``pass`` in a review stage's output."""
    categories = review["categories"]
    return frozenset(c for c in SCORED if categories[c]["decision"] != "pass")


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def score(rows: Iterable[tuple[frozenset[str], frozenset[str]]]) -> dict[str, dict[str, Any]]:
    """Per scored category, over ``(expected, flagged)`` pairs of videos: ``tp``, ``fp``,
    ``fn``, ``precision`` and ``recall`` (None where nothing was flagged, or nothing to
    find)."""
    counts = {c: {"tp": 0, "fp": 0, "fn": 0} for c in SCORED}
    for expected, found in rows:
        for category in SCORED:
            if category in expected and category in found:
                counts[category]["tp"] += 1
            elif category in found:
                counts[category]["fp"] += 1
            elif category in expected:
                counts[category]["fn"] += 1
    return {
        category: {
            "precision": _ratio(n["tp"], n["tp"] + n["fp"]),
            "recall": _ratio(n["tp"], n["tp"] + n["fn"]),
            **n,
        }
        for category, n in counts.items()
    }


def recall_by_place(rows: Iterable[tuple[str | None, bool]]) -> dict[str, dict[str, Any]]:
    """Contact recall by where the contact was, over ``(place, flagged)`` of the videos that
    hold one: ``found`` of ``cases``, and the recall."""
    tally: dict[str, list[int]] = {place: [0, 0] for place in PLACES}
    for place, found in rows:
        if place is not None:
            tally[place][0] += int(found)
            tally[place][1] += 1
    return {
        place: {"recall": _ratio(found, total), "found": found, "cases": total}
        for place, (found, total) in tally.items()
    }


def _evidence(review: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per scored category, what its evidence found: kind, source, value, confidence."""
    return {
        category: [
            {
                "kind": e["kind"],
                "source": e["source"],
                "value": e["value"],
                "confidence": e["confidence"],
                **({"list": e["list"]} if e["list"] else {}),
            }
            for e in review["categories"][category]["evidence"]
        ]
        for category in SCORED
    }


def detail(case: Case, result: VideoResult) -> dict[str, Any]:
    """What one case expected, what the review stage decided and found, and what the stages
    before it read and heard."""
    review = result.outputs[REVIEW].data
    found = flagged(review)
    speech = result.speech
    return {
        "case": case.name,
        "expected": sorted(case.flags),
        "flagged": sorted(found),
        "right": found == case.flags,
        "place": case.place,
        "decision": review["decision"],
        "categories": {
            c: {
                "score": review["categories"][c]["score"],
                "decision": review["categories"][c]["decision"],
            }
            for c in SCORED
        },
        "evidence": _evidence(review),
        "shown": [line for scene in case.scenes for line in scene.lines],
        "read": sorted({line.text for f in result.frames for line in f.ocr_lines}),
        "qr_shown": [scene.qr for scene in case.scenes if scene.qr],
        "qr_read": sorted({str(c["text"]) for f in result.frames for c in f.output(QR) or ()}),
        "said": list(case.said),
        "heard": [s.text for s in speech.segments] if speech is not None else [],
    }


def _config(workdir: Path, terms: Path) -> ServiceConfig:
    return ServiceConfig.load(
        limits={"file_roots": (str(workdir),)},
        runtime={"workdir": str(workdir / "work"), "executor": "local"},
        stages={
            "labels": {"enabled": False},
            "chapters": {"enabled": False},
            "review": {"enabled": True, "qr": True, "terms_dir": str(terms)},
        },
        # The default speech model, whatever the environment says: contact details said are
        # measured on the transcript a deployment gets.
        asr={"enabled": True, "model": AsrSettings.model_fields["model"].default},
    )


def measure(workdir: Path, quick: bool) -> dict[str, Any]:
    items = cases(quick)
    paths = write_cases(items, workdir / "videos")
    config = _config(workdir, write_terms(workdir / "terms"))
    runner = SequentialRunner(Pipeline.from_config(config))
    started = time.monotonic()
    runner.setup()
    setup_s = time.monotonic() - started
    details: list[dict[str, Any]] = []
    seconds = video_s = review_s = qr_s = 0.0
    samples = 0
    try:
        for case, path in zip(items, paths, strict=True):
            started = time.monotonic()
            result = runner.run_one(VideoRef(video_id=case.name, uri=path.as_uri()))
            seconds += time.monotonic() - started
            video_s += result.probe.duration_s
            review_s += result.timings.get(REVIEW, 0.0)
            qr_s += result.timings.get(QR, 0.0)
            samples += sum(1 for f in result.frames if f.repeat_of is None)
            details.append(detail(case, result))
    finally:
        runner.teardown()
    return {
        "categories": score((frozenset(d["expected"]), frozenset(d["flagged"])) for d in details),
        "contact_recall_by_place": recall_by_place(
            (d["place"], "contact" in d["flagged"]) for d in details
        ),
        "wrong": [d["case"] for d in details if not d["right"]],
        "cases": details,
        "videos": len(items),
        "frame_size": list(SIZE),
        "asr_model": config.asr.model,
        "runtime": {
            "setup_s": round(setup_s, 1),
            "pipeline_s": round(seconds, 1),
            "video_s": round(video_s, 1),
            # What the review stage and the qr stage cost (CPU), on their own.
            "review_ms_per_video": round(1000 * review_s / len(items), 2),
            "qr_ms_per_analysed_sample": round(1000 * qr_s / samples, 2) if samples else None,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    return corpus_main(
        argv, __doc__, measure, prefix="reelsense-review-", quick="8 videos, one of each kind"
    )


if __name__ == "__main__":
    raise SystemExit(main())
