"""What the pipeline finds, against edits whose truth is known (``devkit.edited_videos``).

    python -m bench.quality.pipeline [--json OUT] [--workdir DIR] [--quick] [--skip-nonref]

A fixed, seeded corpus of edits (cuts between still and panning shots, dissolves and fades,
flashes, English and Chinese captions shown mid-shot, held across cuts, ended early; English
sentences spoken on the audio track of some, mid-shot and across cuts) and of talks (sentences
across the ends of recognition windows; German, Spanish, and German then English:
``bench.quality.talks``) runs through the real stages with the sequential runner in ``shots``
sampling mode, speech recognition with the default Whisper model included, and each aspect is
scored on its own (``bench.quality.score``): shot boundaries, on-screen text spans, and speech
(word error rate over the English edits, start and end times of each sentence, words heard in
silence, words lost where a window ends, the language of each segment and video:
``bench.quality.speech_report``). The English edits are heard again by the speech stage alone
with Whisper tiny.en, for its word error rate on the same speech. The boundaries of ``fps``
sampling come from decoding alone, without the model stages: they are found on every decoded
frame, whatever is sampled.

Videos are written under ``--workdir`` (a temporary directory by default), named after what is
in them, so a run with the same workdir reuses them (``bench.quality.corpus``).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from operator import add
from pathlib import Path
from typing import Any

from bench.quality.corpus import FPS, SIZE, VOICE, Edit, corpus, write_corpus
from bench.quality.languages import mandarin_cer
from bench.quality.score import (
    SPEECH_TOLERANCE_S,
    TEXT_SIMILARITY,
    TOLERANCE_S,
    WINDOW_S,
    rounded_items,
    score_shots,
    score_text,
)
from bench.quality.speech_report import (
    COMPARED_MODEL,
    SPEECH_MODEL,
    SpeechFigures,
    compared,
    speech_lines,
)
from bench.quality.talks import talks
from bench.runs import in_workdir, write_json
from core.config import ServiceConfig
from core.records import Frame, VideoRef
from core.shots import video_shots
from core.spans import TextSpan, text_spans
from core.speech import Speech, heard
from devkit.edited_videos import EditTruth
from stages.fetch import FetchProbeStage
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner
from stages.speech import SpeechStage

SAMPLE_FPS = 1.0


@dataclass
class Findings:
    """What the pipeline found in one edit."""

    boundaries: list[tuple[float, str]]  # shots sampling, the whole pipeline
    fps_boundaries: list[tuple[float, str]]  # fps sampling, decoding alone
    spans: list[TextSpan]
    speech: Speech | None  # None: recognition did not run
    compared: Speech | None = None  # heard by COMPARED_MODEL alone; None: not asked


def boundaries_of(frames: Sequence[Frame], duration_s: float) -> list[tuple[float, str]]:
    """(start, "cut" | "gradual") of every shot but the first, as the service reports them."""
    return [(s.start_s, s.entered_by) for s in video_shots(frames, duration_s)[1:]]


def analyse(
    truths: Sequence[EditTruth],
    workdir: Path,
    *,
    skip_nonref: bool = False,
    compare: Sequence[bool] = (),
) -> tuple[list[Findings], dict[str, float]]:
    """Run the pipeline over the edits, then the speech stage alone with ``COMPARED_MODEL``
    over those ``compare`` marks: the findings of each, and the seconds the pipeline's setup
    (``setup_s``) and the second model's run (``compare_s``) took.
    ``skip_nonref``: ``stages.skip_nonref_frames``."""

    def config(mode: str, speech: bool) -> ServiceConfig:
        return ServiceConfig.load(
            limits={"file_roots": (str(workdir),)},
            runtime={"workdir": str(workdir / "work"), "executor": "local"},
            stages={
                "sample_mode": mode,
                "sample_fps": SAMPLE_FPS,
                "skip_nonref_frames": skip_nonref,
            },
            # Whatever the environment says: the edits' speech is scored, by the default model,
            # and its timing by the words' timestamps.
            asr={"enabled": speech, "word_timestamps": True, "model": SPEECH_MODEL},
        )

    full = config("shots", speech=True)
    runner = SequentialRunner(Pipeline.from_config(full))
    started = time.monotonic()
    runner.setup()
    setup_s = time.monotonic() - started
    # Only fetch and decode of this one are set up: no model is loaded twice.
    decode_only = Pipeline.from_config(config("fps", speech=False))
    decode_only.fetch.setup()
    decode_only.decode.setup()
    findings = []
    try:
        try:
            for truth in truths:
                result = runner.run_one(_ref(truth))
                video = decode_only.fetch.open(_ref(truth))
                try:
                    fps_frames = [f for c in decode_only.decode.stream(video) for f in c.frames]
                finally:
                    decode_only.fetch.release(video)
                findings.append(
                    Findings(
                        boundaries=boundaries_of(result.frames, truth.duration_s),
                        fps_boundaries=boundaries_of(fps_frames, truth.duration_s),
                        spans=text_spans(result.frames),
                        speech=result.speech,
                    )
                )
        finally:
            runner.teardown()  # the default model is let go before the other one loads
        started = time.monotonic()
        chosen = [i for i, mark in enumerate(compare) if mark]
        other = SpeechStage(full.asr.model_copy(update={"model": COMPARED_MODEL}), full.limits)
        heard_by_other = listen([truths[i] for i in chosen], other, decode_only.fetch)
        for i, speech in zip(chosen, heard_by_other, strict=True):
            findings[i].compared = speech
        compare_s = time.monotonic() - started
    finally:
        decode_only.decode.teardown()
        decode_only.fetch.teardown()
    return findings, {"setup_s": setup_s, "compare_s": compare_s}


def _ref(truth: EditTruth) -> VideoRef:
    return VideoRef(video_id=truth.path.stem, uri=truth.path.resolve().as_uri())


def listen(truths: Sequence[EditTruth], stage: SpeechStage, fetch: FetchProbeStage) -> list[Speech]:
    """The speech of each edit as ``stage`` alone hears it (what the frames' stages find does
    not change it); ``fetch`` is set up, ``stage`` is torn down after."""
    speeches = []
    try:
        for truth in truths:
            video = fetch.open(_ref(truth))
            try:
                speeches.append(heard(stage.stream(video)))
            finally:
                fetch.release(video)
    finally:
        stage.teardown()
    return speeches


def report(
    edits: Sequence[Edit], truths: Sequence[EditTruth], findings: Sequence[Findings]
) -> dict[str, Any]:
    """The figures over the whole corpus (every edit's items counted once), and per edit what
    was missed and what was found that is not there."""
    shots, fps_shots, text, speech, per_edit = [], [], [], SpeechFigures(), {}
    for edit, truth, found in zip(edits, truths, findings, strict=True):
        shots.append(score_shots(truth, found.boundaries))
        fps_shots.append(score_shots(truth, found.fps_boundaries))
        text.append(score_text(truth, found.spans))
        per_edit[edit.name] = {
            "shots": shots[-1].summary(),
            "shots_found": rounded_items(found.boundaries),
            "shots_missed": rounded_items(shots[-1].missed),
            "shots_false": rounded_items(shots[-1].false),
            "fps_shots_missed": rounded_items(fps_shots[-1].missed),
            "fps_shots_false": rounded_items(fps_shots[-1].false),
            "text": text[-1].summary(),
            "text_missed": rounded_items(text[-1].missed),
            "text_false": rounded_items(text[-1].false),
            "text_found": rounded_items(
                [(s.text, s.start_s, s.end_s, s.score) for s in found.spans]
            ),
            **speech.add(edit, truth, found.speech, found.compared),
        }
    all_shots = reduce(add, shots).summary()
    all_text = reduce(add, text).summary()
    return {
        "shot_precision": all_shots["precision"],
        "shot_recall": all_shots["recall"],
        "shot_recall_by_kind": all_shots["recall_by_kind"],
        "shots": all_shots,
        "shots_fps_mode": reduce(add, fps_shots).summary(),
        "text_span_precision": all_text["precision"],
        "text_span_recall": all_text["recall"],
        "text_spans": all_text,
        **speech.totals(),
        "edits": per_edit,
    }


def describe(edits: Sequence[Edit], truths: Sequence[EditTruth], quick: bool) -> dict[str, Any]:
    return {
        "quick": quick,
        "videos": len(edits),
        "video_s": round(sum(t.duration_s for t in truths), 2),
        "size": f"{SIZE[0]}x{SIZE[1]}",
        "fps": FPS,
        "sample_mode": "shots",
        "sample_fps": SAMPLE_FPS,
        "tolerance_s": TOLERANCE_S,
        "text_similarity": TEXT_SIMILARITY,
        "speech_voice": f"espeak-ng {VOICE}",
        "languages": sorted({v for edit in edits for v in edit.voices()}),
        "speech_model": SPEECH_MODEL,
        "speech_compared_model": COMPARED_MODEL,
        "speech_tolerance_s": SPEECH_TOLERANCE_S,
        "speech_window_s": WINDOW_S,
        "speech_s": round(sum(u.end_s - u.start_s for t in truths for u in t.utterances), 2),
        "edits": [
            {
                "name": edit.name,
                "about": edit.about,
                "duration_s": round(truth.duration_s, 2),
                "boundaries": rounded_items(truth.boundaries),
                "captions": rounded_items(truth.captions),
                "flashes": [round(t, 3) for t in truth.flashes],
                "speech": rounded_items([(u.text, u.start_s, u.end_s) for u in truth.utterances]),
                "languages": list(edit.voices()),
            }
            for edit, truth in zip(edits, truths, strict=True)
        ],
    }


def table(result: dict[str, Any]) -> str:
    """The figures as plain text, then each edit's misses and false finds."""

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    about = result["corpus"]
    rows = [
        f"quality on {about['videos']} edits, {about['video_s']:.0f} s of video "
        f"({about['sample_mode']} sampling at {about['sample_fps']} fps)",
        f"{'aspect':<24}{'precision':>10}{'recall':>8}{'truth':>7}{'found':>7}{'matched':>9}",
    ]
    for name, figures in (
        ("shot boundaries", result["shots"]),
        ("shot boundaries (fps)", result["shots_fps_mode"]),
        ("text spans", result["text_spans"]),
    ):
        counts = figures["counts"]
        rows.append(
            f"{name:<24}{fmt(figures['precision']):>10}{fmt(figures['recall']):>8}"
            f"{counts['truth']:>7}{counts['found']:>7}{counts['matched']:>9}"
        )
    speech = result["speech"]
    rows.extend(speech_lines(result))
    kinds = result["shots"]["counts_by_kind"]
    rows.append(
        "shot recall by kind: "
        + ", ".join(f"{k} {c['matched']}/{c['truth']}" for k, c in kinds.items())
        + f"; kind right in {fmt(result['shots']['kind_agreement'])} of matches; "
        f"{result['shots']['false_at_flashes']} false at flashes"
    )
    for name, figures in (("span", result["text_spans"]), ("sentence", speech)):
        rows.append(
            f"{name} time error (mean absolute): start {fmt(figures['start_error_s'])} s, "
            f"end {fmt(figures['end_error_s'])} s (bias {fmt(figures['start_bias_s'])}, "
            f"{fmt(figures['end_bias_s'])} s)"
        )
    for name, edit in result["edits"].items():
        for key in (
            "shots_missed",
            "shots_false",
            "text_missed",
            "text_false",
            "speech_errors",
            "speech_boundary_lost",
        ):
            if edit[key]:
                rows.append(f"  {name}: {key.replace('_', ' ')} {edit[key]}")
    runtime = result["runtime"]
    rows.append(
        f"runtime: {runtime['total_s']:.0f} s (writing videos {runtime['write_s']:.0f} s, "
        f"model setup {runtime['setup_s']:.0f} s, analysis {runtime['analyse_s']:.0f} s, "
        f"speech again with {COMPARED_MODEL} {runtime['compare_s']:.0f} s)"
    )
    return "\n".join(rows)


def measure(workdir: Path, quick: bool, *, skip_nonref: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    edits = corpus(quick) + talks(quick)
    truths = write_corpus(edits, workdir / "videos")
    written = time.monotonic()
    findings, took = analyse(
        truths, workdir, skip_nonref=skip_nonref, compare=[compared(edit) for edit in edits]
    )
    done = time.monotonic()
    result = report(edits, truths, findings)
    result["speech_zh_recorded"] = mandarin_cer()
    result["corpus"] = describe(edits, truths, quick)
    result["skip_nonref_frames"] = skip_nonref
    result["runtime"] = {
        "total_s": round(done - started, 2),
        "write_s": round(written - started, 2),
        "setup_s": round(took["setup_s"], 2),
        "analyse_s": round(done - written - took["setup_s"] - took["compare_s"], 2),
        "compare_s": round(took["compare_s"], 2),
        "cpus": os.cpu_count(),
    }
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--workdir", type=Path, help="where videos are written and kept")
    parser.add_argument(
        "--quick", action="store_true", help="two short edits and the switching talk only"
    )
    parser.add_argument(
        "--skip-nonref", action="store_true", help="stages.skip_nonref_frames (B-frames left out)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = in_workdir(
        lambda path: measure(path, args.quick, skip_nonref=args.skip_nonref),
        args.workdir,
        "reelsense-quality-",
    )
    print(table(result))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
