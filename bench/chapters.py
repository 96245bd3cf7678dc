"""Chapters against talks whose topic changes at known times.

    python -m bench.chapters [--json OUT] [--workdir DIR] [--quick]

Each talk is three or four topics of 36 s. A topic is three slides of 12 s (a textured shot
with a point of the topic on screen, joined by hard cuts) while espeak-ng says six sentences on
it, so two cuts in three change only the slide and the pauses between sentences are
everywhere: a chapter must come from what is said and shown, not from a cut or a pause alone.
Every talk is made twice: with the topic's title on each slide (``talkN``), and without
(``talkN-untitled``: every slide's text is new, so the topic is found in what is said). The
talks run through the real stages (decode, OCR, speech recognition, the chapters stage) with
the sequential runner, and each chapter start is scored against the topic changes: precision
and recall of boundaries within 3 s (one found boundary per true one).

Beside them, what a user would otherwise do without a chapters model: a chapter at every shot
cut (``every_cut``), scored the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.quality.corpus import Edit, write_corpus
from bench.quality.pipeline import boundaries_of
from bench.quality.score import greedy_pairs
from bench.runs import corpus_main
from core.config import AsrSettings, ServiceConfig
from core.records import VideoRef
from devkit.edited_videos import Caption, Shot
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner

TOLERANCE_S = 3.0
SLIDE_S = 12.0
SENTENCE_EVERY_S = 6.0

#: Each topic: its title, three points (one a slide), and six sentences said over them.
TOPICS: dict[str, tuple[str, tuple[str, str, str], tuple[str, ...]]] = {
    "bread": (
        "BAKING BREAD",
        ("FLOUR AND WATER", "KNEADING", "THE OVEN"),
        (
            "Bread starts with flour, water, salt and a little yeast.",
            "The yeast eats sugar in the flour and makes the dough rise.",
            "Knead the dough until it feels smooth and springs back.",
            "Let the dough rest in a warm place for an hour.",
            "Bake the loaf in a very hot oven until the crust is brown.",
            "A good loaf sounds hollow when you tap the bottom.",
        ),
    ),
    "tides": (
        "OCEAN TIDES",
        ("THE MOON", "HIGH AND LOW WATER", "THE COAST"),
        (
            "The tides are pulled by the gravity of the moon and the sun.",
            "The ocean bulges on the side of the earth that faces the moon.",
            "Most coasts see two high tides and two low tides every day.",
            "The highest tides come when the sun and the moon line up.",
            "Some bays funnel the sea water into huge tidal ranges.",
            "Sailors read tide tables before they leave the harbor.",
        ),
    ),
    "bikes": (
        "FIXING A BICYCLE",
        ("THE CHAIN", "TIRES", "BRAKES"),
        (
            "A bicycle chain needs cleaning and a few drops of oil.",
            "Shift through the gears to check that the chain runs quietly.",
            "Pump the tires to the pressure printed on their side wall.",
            "A flat tire is fixed by patching the inner tube.",
            "Squeeze the brake levers and watch the pads touch the rim.",
            "Worn brake pads should be replaced before a long ride.",
        ),
    ),
    "volcanoes": (
        "VOLCANOES",
        ("MAGMA", "ERUPTIONS", "ASH CLOUDS"),
        (
            "Deep under a volcano, melted rock called magma collects.",
            "Gas in the magma pushes it up through cracks in the crust.",
            "When the pressure is too high the volcano erupts.",
            "Lava flows down the slopes and slowly cools into rock.",
            "An explosive eruption throws ash high into the sky.",
            "Ash clouds can stop airplanes from flying for days.",
        ),
    ),
    "garden": (
        "GROWING TOMATOES",
        ("SEEDS", "SOIL AND WATER", "HARVEST"),
        (
            "Sow tomato seeds indoors in small pots in early spring.",
            "Move the young plants outside when the nights are warm.",
            "Tomatoes like rich soil and plenty of sunshine.",
            "Water the plants deeply at the roots, not on the leaves.",
            "Tie the stems to a stake so the fruit does not touch the ground.",
            "Pick the tomatoes when they are red and slightly soft.",
        ),
    ),
    "chess": (
        "LEARNING CHESS",
        ("THE PIECES", "OPENINGS", "CHECKMATE"),
        (
            "Each chess player starts with sixteen pieces on the board.",
            "The knight moves in the shape of the letter L.",
            "In the opening, bring your pieces toward the center.",
            "Castle early to keep your king safe behind the pawns.",
            "The game ends in checkmate when the king cannot escape.",
            "Strong players study endgames with only a few pieces left.",
        ),
    ),
}

TALKS: tuple[tuple[str, ...], ...] = (
    ("bread", "tides", "bikes"),
    ("volcanoes", "garden", "chess", "bread"),
    ("chess", "tides", "volcanoes"),
    ("garden", "bikes", "volcanoes", "tides"),
)


@dataclass(frozen=True)
class Talk:
    edit: Edit
    changes: tuple[float, ...]  # where a new topic starts (not 0)


def talk(topics: Sequence[str], number: int, *, titled: bool = True) -> Talk:
    """A talk on ``topics`` in turn (``bench.chapters``'s docstring says how it is made);
    ``titled``: each slide also shows its topic's title."""
    shots: list[Shot] = []
    speech: list[tuple[float, str]] = []
    topic_s = 3 * SLIDE_S
    for t, name in enumerate(topics):
        title, points, sentences = TOPICS[name]
        for s, point in enumerate(points):
            shots.append(
                Shot(
                    SLIDE_S,
                    seed=100 * number + 10 * t + s,
                    caption=point,
                    more_captions=(Caption(title, where="top"),) if titled else (),
                )
            )
        speech += [(t * topic_s + 0.8 + i * SENTENCE_EVERY_S, x) for i, x in enumerate(sentences)]
    name = f"talk{number}" + ("" if titled else "-untitled")
    edit = Edit(name, "a talk on " + ", ".join(topics), tuple(shots), tuple(speech))
    return Talk(edit, tuple(t * topic_s for t in range(1, len(topics))))


def score(found: Sequence[float], truth: Sequence[float]) -> tuple[int, int, int]:
    """(found, true, matched): boundaries paired one to one within ``TOLERANCE_S``."""
    candidates = [
        (abs(f - t), i, j)
        for i, f in enumerate(found)
        for j, t in enumerate(truth)
        if abs(f - t) <= TOLERANCE_S
    ]
    return len(found), len(truth), len(greedy_pairs(candidates))


def _ratios(found: int, true: int, matched: int) -> dict[str, float | None]:
    return {
        "precision": round(matched / found, 3) if found else None,
        "recall": round(matched / true, 3) if true else None,
    }


def measure(workdir: Path, quick: bool) -> dict[str, Any]:
    talks = [
        talk(topics, n, titled=titled)
        for titled in (True, False)
        for n, topics in enumerate(TALKS[:1] if quick else TALKS)
    ]
    truths = write_corpus([t.edit for t in talks], workdir / "talks")
    config = ServiceConfig.load(
        limits={"file_roots": (str(workdir),)},
        runtime={"workdir": str(workdir / "work"), "executor": "local"},
        stages={"labels": {"enabled": False}},
        # The default speech model, whatever the environment says: chapters are measured on
        # the transcript a deployment gets (tiny.en mishears more and moves a boundary).
        asr={"enabled": True, "model": AsrSettings.model_fields["model"].default},
    )
    runner = SequentialRunner(Pipeline.from_config(config))
    runner.setup()
    totals = {"chapters": [0, 0, 0], "every_cut": [0, 0, 0]}
    per_talk = []
    seconds = stage_s = 0.0
    try:
        for item, truth in zip(talks, truths, strict=True):
            started = time.monotonic()
            result = runner.run_one(VideoRef(video_id=item.edit.name, uri=truth.path.as_uri()))
            seconds += time.monotonic() - started
            stage_s += result.timings.get("chapters", 0.0)
            chapters = result.outputs["chapters"].data["chapters"]
            starts = [c["start_s"] for c in chapters[1:]]
            cuts = [t for t, _ in boundaries_of(result.frames, result.probe.duration_s)]
            for key, found in (("chapters", starts), ("every_cut", cuts)):
                counts = score(found, item.changes)
                totals[key] = [a + b for a, b in zip(totals[key], counts, strict=True)]
            per_talk.append(
                {
                    "talk": item.edit.name,
                    "changes": list(item.changes),
                    "chapter_starts": starts,
                    "titles": [c["title"] for c in chapters],
                    "summaries": [c["summary"] for c in chapters],
                }
            )
    finally:
        runner.teardown()
    return {
        **_ratios(*totals["chapters"]),
        "every_cut": _ratios(*totals["every_cut"]),
        "tolerance_s": TOLERANCE_S,
        "talks": per_talk,
        "video_s": sum(t.duration_s for t in truths),
        "pipeline_s": round(seconds, 1),
        # The chapters stage alone, per video: what adding it to a finished video costs.
        "chapters_s_per_video": round(stage_s / len(talks), 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    return corpus_main(argv, __doc__, measure, prefix="reelsense-chapters-", quick="one talk")


if __name__ == "__main__":
    raise SystemExit(main())
