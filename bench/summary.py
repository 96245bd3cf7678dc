"""Summaries, tags and categories of ``bench.quality``'s corpus with the CPU engine.

    python -m bench.summary [--json OUT] [--workdir DIR] [--quick]

The corpus's edits (cuts, captions in English and Chinese, spoken sentences) run through the
real stages with the sequential runner, the summary stage on (llama.cpp with the packaged
SmolLM2-135M, greedy). Each answer is checked against the schema the stage asked for
(``stages.summary.answer_schema``): the figure is how many are valid, not how good they are
(a 135M model proves the path, not quality). The stage's seconds per video are reported too.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema

from bench.quality.corpus import corpus, write_corpus
from bench.runs import corpus_main
from core.config import ServiceConfig
from core.records import VideoRef
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner
from stages.summary import answer_schema

#: What the stage adds to the model's answer in its output; the rest is the answer.
_ADDED = ("language", "prompt")


def measure(workdir: Path, quick: bool) -> dict[str, Any]:
    truths = write_corpus(corpus(quick), workdir / "edits")
    config = ServiceConfig.load(
        limits={"file_roots": (str(workdir),)},
        runtime={"workdir": str(workdir / "work"), "executor": "local"},
        stages={"summary": {"enabled": True}},
        asr={"enabled": True},
    )
    settings = config.stages.summary
    runner = SequentialRunner(Pipeline.from_config(config))
    runner.setup()
    answers: list[dict[str, Any]] = []
    try:
        for truth in truths:
            result = runner.run_one(VideoRef(video_id=truth.path.stem, uri=truth.path.as_uri()))
            data = dict(result.outputs["summary"].data)
            chapters = len(result.outputs["chapters"].data["chapters"])
            answer = {k: v for k, v in data.items() if k not in _ADDED}
            valid, why = True, ""
            if data.get("summary") is None:
                valid, why = False, str(data.get("reason"))
            else:
                try:
                    jsonschema.validate(answer, answer_schema(settings, chapters))
                except jsonschema.ValidationError as exc:
                    valid, why = False, exc.message
            answers.append(
                {
                    "video": truth.path.stem,
                    "valid": valid,
                    "why": why,
                    "seconds": round(result.timings.get("summary", 0.0), 2),
                    "answer": answer,
                }
            )
    finally:
        runner.teardown()
    seconds = [a["seconds"] for a in answers]
    return {
        "videos": len(answers),
        "schema_valid": sum(a["valid"] for a in answers),
        "summary_s_mean": round(statistics.mean(seconds), 2),
        "summary_s_max": max(seconds),
        "answers": answers,
    }


def main(argv: Sequence[str] | None = None) -> int:
    return corpus_main(
        argv, __doc__, measure, prefix="reelsense-summary-", quick="the corpus's two short edits"
    )


if __name__ == "__main__":
    raise SystemExit(main())
