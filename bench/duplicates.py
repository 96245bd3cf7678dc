"""Re-uploads found: precision and recall by change, and the lookup's latency at 100k videos.

    python -m bench.duplicates [--json OUT] [--workdir DIR] [--quick]

The corpus (``bench.duplicate_cases``): 8 originals of 60 s, each copied 7 ways (a third of
the bitrate, 360p, a 10% crop, a logo, 10% faster, mirrored, a 30 s clip from the middle),
and 6 pairs of unrelated videos that open with the same title card or black intro. Every
video runs through the real stages (decode and sampling at 1 fps, the ``fingerprint`` stage,
the ``duplicates`` stage) with the sequential runner; the originals and the first of each
pair are written to table ``fingerprints`` first (the library), then the copies and the
seconds of the pairs are looked up. A copy is right when it finds its original; anything
else found is wrong.

Then the lookup's latency: a ``fingerprints`` table of synthetic fingerprints (60 samples a
video, shots of 8 samples whose hashes drift 3 bits a second) of 10k and then 100k videos,
with the originals among them, read into the library (timed), and each looked-up video's
lookup timed (both orientations, the alignment included), p50 and p95.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

from bench.duplicate_cases import Video, write_corpus
from bench.runs import corpus_main
from core.config import ServiceConfig
from core.records import VideoRef, VideoResult
from core.stage_names import DECODE, DUPLICATES, FETCH, FINGERPRINT
from devkit.copies import CHANGES
from sinks.fingerprint_library import FingerprintLibrary
from sinks.fingerprints import (
    TABLE,
    LanceFingerprintSink,
    Sampled,
    fingerprint_of,
    fingerprints_schema,
    signed,
)
from sinks.lance_table import LanceTable
from stages.duplicates import DuplicatesStage
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner

_SYNTHETIC_SAMPLES = 60
_SHOT_SAMPLES = 8
_DRIFT_BITS = 3  # bits of a hash that change from one sample of a shot to the next


def _config(workdir: Path) -> ServiceConfig:
    return ServiceConfig.load(
        limits={"file_roots": (str(workdir),)},
        runtime={"workdir": str(workdir / "work"), "executor": "local"},
        storage={"lance_uri": str(workdir / f"lance-{os.getpid()}-{time.time_ns()}")},
    )


def _runner(config: ServiceConfig) -> SequentialRunner:
    wanted = (FETCH, DECODE, FINGERPRINT, DUPLICATES)
    stages = Pipeline.from_config(config).stages
    return SequentialRunner(Pipeline(tuple(s for s in stages if s.name in wanted)))


def score(videos: Sequence[Video], found: dict[str, list[str]]) -> dict[str, Any]:
    """Precision over everything found, recall over the copies, and recall by change."""
    right = wrong = 0
    by_change: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for video in videos:
        if video.library:
            continue
        hits = found.get(video.name, [])
        right += int(video.original in hits)
        wrong += sum(1 for other in hits if other != video.original)
        if video.change is not None:
            by_change[video.change][0] += int(video.original in hits)
            by_change[video.change][1] += 1
    copies = sum(total for _, total in by_change.values())
    return {
        "precision": round(right / (right + wrong), 4) if right + wrong else None,
        "recall": round(right / copies, 4) if copies else None,
        "recall_by_transformation": {
            change: round(hit / total, 4) for change, (hit, total) in sorted(by_change.items())
        },
        "found": right,
        "false_matches": wrong,
        "copies": copies,
    }


def synthetic_rows(videos: int, real: dict[str, list[Sampled]], seed: int = 0) -> pa.Table:
    """The ``fingerprints`` rows of ``videos`` synthetic videos and of the ``real`` ones."""
    rng = np.random.default_rng(seed)
    count = videos * _SYNTHETIC_SAMPLES
    # Each shot's first hash at random (the DC term's bit, the first, clear), then a few bits
    # flip a sample.
    hashes = rng.integers(0, 1 << 63, size=count, dtype=np.int64)
    flips = np.zeros(count, dtype=np.int64)
    for _ in range(_DRIFT_BITS):
        flips |= np.int64(1) << rng.integers(0, 63, size=count)
    position = np.tile(np.arange(_SYNTHETIC_SAMPLES), videos)
    for i in range(1, _SYNTHETIC_SAMPLES):
        within = np.flatnonzero((position == i) & (i % _SHOT_SAMPLES != 0))
        hashes[within] = hashes[within - 1] ^ flips[within]
    ids = np.repeat([f"synthetic-{v}" for v in range(videos)], _SYNTHETIC_SAMPLES).tolist()
    times = position.astype(np.float32).tolist()
    indexes = position.tolist()
    for name, samples in real.items():
        ids += [name] * len(samples)
        times += [s.time_s for s in samples]
        indexes += [s.index for s in samples]
        hashes = np.concatenate([hashes, [signed(s.hash.value) for s in samples]])
    return pa.table(
        {
            "video_id": ids,
            "tenant": ["default"] * len(ids),
            "sample": pa.array(indexes, pa.int32()),
            "time_s": pa.array(times, pa.float32()),
            "hash": pa.array(hashes, pa.int64()),
        },
        schema=fingerprints_schema(),
    )


def lookup_latency(
    config: ServiceConfig,
    videos: Sequence[Video],
    samples: dict[str, list[Sampled]],
    size: int,
    workdir: Path,
) -> dict[str, Any]:
    """p50 and p95 of the looked-up videos' lookups in a library of ``size`` synthetic videos
    and the corpus's library videos, written to a ``fingerprints`` table and read back."""
    real = {video.name: samples[video.name] for video in videos if video.library}
    table = LanceTable(str(workdir / f"synthetic-{size}" / f"{TABLE}.lance"))
    lance.write_dataset(synthetic_rows(size, real), table.uri, mode="overwrite")
    library = FingerprintLibrary(table)
    started = time.monotonic()
    library.refresh()
    read_s = time.monotonic() - started
    stage = DuplicatesStage(config.stages.duplicates, config.storage, library=library)
    timings = []
    found = 0
    for video in videos:
        if video.library:
            continue
        mark = time.perf_counter()
        result = stage.lookup(samples[video.name], tenant="default", exclude=video.name)
        timings.append(1000 * (time.perf_counter() - mark))
        found += int(bool(result))
    return {
        "videos": library.videos,
        "rows": library.rows,
        "index_mb": round(library.nbytes / 2**20),
        "read_s": round(read_s, 2),  # the table read and indexed
        "p50_ms": round(float(np.percentile(timings, 50)), 2),
        "p95_ms": round(float(np.percentile(timings, 95)), 2),
        "lookups": len(timings),
        "lookups_finding_something": found,
    }


def measure(workdir: Path, quick: bool) -> dict[str, Any]:
    videos = write_corpus(workdir / "videos", quick)
    config = _config(workdir)
    runner = _runner(config)
    sink = LanceFingerprintSink.from_settings(config.storage)
    runner.setup()
    found: dict[str, list[str]] = {}
    samples: dict[str, list[Sampled]] = {}
    details: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for video in videos:
            ref = VideoRef(video_id=video.name, uri=video.path.as_uri())
            result: VideoResult = runner.run_one(ref)
            samples[video.name] = fingerprint_of(result.frames)
            output = result.outputs[DUPLICATES].data
            if video.library:
                sink.write([result])
                continue
            found[video.name] = [d["video_id"] for d in output[DUPLICATES]]
            details.append(
                {"video": video.name, "original": video.original, "found": output[DUPLICATES]}
            )
    finally:
        runner.teardown()
    pipeline_s = time.monotonic() - started
    sizes = (1_000, 10_000) if quick else (10_000, 100_000)
    latency = {
        f"{size // 1000}k": lookup_latency(config, videos, samples, size, workdir) for size in sizes
    }
    top = latency[f"{sizes[-1] // 1000}k"]
    return {
        **score(videos, found),
        f"lookup_p95_ms_{sizes[-1] // 1000}k": top["p95_ms"],
        "lookup": latency,
        "changes": list(CHANGES),
        "videos": len(videos),
        "library_videos": sum(1 for v in videos if v.library),
        "runtime": {
            "pipeline_s": round(pipeline_s, 1),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        },
        "cases": details,
    }


def main(argv: Sequence[str] | None = None) -> int:
    return corpus_main(
        argv,
        __doc__,
        measure,
        prefix="reelsense-duplicates-",
        quick="2 originals of 40 s, 2 look-alike pairs; libraries of 1k and 10k",
    )


if __name__ == "__main__":
    raise SystemExit(main())
