"""Per-stage cost per sampled frame, measured with the sequential runner (no Ray).

    python -m bench.perf.stage_cost [--videos 2] [--seconds 20] [--speech-seconds 60] [--json OUT]

Generates 720p videos with film grain and burned-in text, runs the real stages one video after
another in this process, and reports CPU milliseconds per sampled frame for each stage (process
CPU time, so a multi-threaded decoder is charged for every thread), plus wall time; then
decoding alone with shot detection, repeat marking and ``shots`` sampling off and on
(``decode_variants``: CPU ms per video second, samples, repeats, boundaries). Those videos are
silent; speech recognition is measured on its own: ``SpeechStage.stream`` over a video that
talks throughout (espeak-ng sentences 3.5 s apart, word timestamps on), as CPU seconds (and
milliseconds) per second of audio and real-time factor (wall time over audio time), with the
model's load time apart, once with each bundled Whisper: ``speech`` the default (base),
``speech_tiny_en`` tiny.en, and the two side by side in ``speech_cpu_s_per_audio_s``. The review
labels are measured on their own too: the ``qr`` stage's reader on 720p frames with and without
a code (``qr``: CPU ms per frame, one thread), and the ``review`` stage on the result of a
10-minute video with some hundreds of text spans and speech segments (``review``: ms per
video). The speech stage's audio event detector is measured on its own as well, on a melody of
``--speech-seconds`` (``audio_events``: CPU seconds per second of audio, ``bench.perf.
audio_events_cost``). The speech comparison and those figures are also printed, as a line of
text, to stderr.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from bench.perf.audio_events_cost import audio_events_cost
from bench.quality.corpus import corpus
from bench.runs import emit
from core.config import AsrSettings, ReviewSettings, ServiceConfig
from core.records import Frame, OcrLine, ProbeInfo, VideoRef, VideoResult
from core.spans import text_spans
from core.speech import Speech, SpeechPart, SpeechSegment, heard
from core.stage_names import QR
from devkit.samples import demo_scenes, qr_image, render_frame, write_long_video
from devkit.speech_videos import SpeechTruth, write_speech_video
from models.asr import AsrEngine
from models.qr import QrReader
from models.whisper_files import BundledWhisper
from stages.decode import DecodeSampleStage
from stages.pipeline import Pipeline
from stages.review import ReviewStage
from stages.runner import SequentialRunner
from stages.speech import SpeechStage

# A sentence starts every SENTENCE_EVERY_S; the longest spoken lasts 2.9 s, with its silence.
SENTENCE_EVERY_S = 3.5
# The bundled Whisper models, the default (whatever the environment says) first.
DEFAULT_MODEL: BundledWhisper = AsrSettings.model_fields["model"].default
OTHER_MODEL: BundledWhisper = "tiny.en"


def measure(
    videos: int, seconds: float, workdir: Path, speech_seconds: float = 60.0
) -> dict[str, object]:
    paths = [
        write_long_video(workdir / f"bench-{i}.mp4", seconds, seed=i).path for i in range(videos)
    ]
    config = ServiceConfig.load(
        limits={"file_roots": (str(workdir),)},
        runtime={"workdir": str(workdir / "work"), "executor": "local"},
        storage={"lance_uri": str(workdir / "lance")},  # the duplicates stage's empty library
    )
    runner = SequentialRunner(Pipeline.from_config(config))
    started = time.monotonic()
    runner.setup()
    setup_s = time.monotonic() - started
    cpu: dict[str, float] = defaultdict(float)
    frames = 0
    started = time.monotonic()
    for i, path in enumerate(paths):
        result = runner.run_one(VideoRef(video_id=f"bench-{i}", uri=path.resolve().as_uri()))
        frames += len(result.frames)
        for stage, seconds_cpu in result.timings.items():
            cpu[stage] += seconds_cpu
    wall_s = time.monotonic() - started
    runner.teardown()
    decode_variants = {
        name: decode_cost(paths, seconds, config, **variant)
        for name, variant in DECODE_VARIANTS.items()
    }
    return {
        "videos": videos,
        "video_seconds": seconds,
        "sampled_frames": frames,
        "setup_s": round(setup_s, 2),
        "wall_s": round(wall_s, 2),
        "cpu_s_per_video": round(sum(cpu.values()) / videos, 2),
        "cpu_ms_per_frame": {stage: round(1000 * s / frames, 1) for stage, s in cpu.items()},
        "decode_variants": decode_variants,
        **speech_costs(speech_seconds, config, workdir),
        "audio_events": audio_events_cost(speech_seconds),
        "qr": qr_cost(),
        "review": review_cost(workdir),
        "cpus": os.cpu_count(),
    }


# What shot detection, repeat marking and shots sampling add to decoding.
DECODE_VARIANTS: dict[str, dict[str, object]] = {
    "plain": {"shot_detection": False, "repeat_max_change": 0.0},
    "shots_found": {"shot_detection": True, "repeat_max_change": 0.0},
    "shots_and_repeats": {"shot_detection": True, "repeat_max_change": 8.0},
    "shots_mode": {"sample_mode": "shots", "repeat_max_change": 8.0},
}


def decode_cost(
    paths: list[Path], seconds: float, config: ServiceConfig, **stages: object
) -> dict[str, float]:
    """Decoding alone under one variant of the stage settings: CPU per video second, samples,
    repeats and boundaries found."""
    settings = config.stages.model_copy(update=stages)
    decode = DecodeSampleStage(settings, config.limits)
    fetch = Pipeline.from_config(config).fetch
    samples = repeats = boundaries = 0
    started = time.process_time()
    for i, path in enumerate(paths):
        video = fetch.process_batch([VideoRef(video_id=f"v{i}", uri=path.resolve().as_uri())])[0]
        for chunk in decode.stream(video):
            samples += len(chunk.frames)
            repeats += sum(1 for f in chunk.frames if f.repeat_of is not None)
            boundaries += sum(len(f.boundaries) for f in chunk.frames)
        fetch.release(video)
    cpu_s = time.process_time() - started
    return {
        "cpu_ms_per_video_s": round(1000 * cpu_s / (seconds * len(paths)), 2),
        "samples": samples,
        "repeats": repeats,
        "boundaries": boundaries,
    }


def talk(seconds: float) -> list[tuple[float, str]]:
    """A script that talks for ``seconds``: the quality corpus's sentences (English, no
    digits), one every ``SENTENCE_EVERY_S``, over and over."""
    sentences = [text for edit in corpus(quick=False) for _, text in edit.speech]
    count = max(1, int((seconds - 3.0) // SENTENCE_EVERY_S) + 1)
    return [(i * SENTENCE_EVERY_S, sentences[i % len(sentences)]) for i in range(count)]


def speech_costs(seconds: float, config: ServiceConfig, workdir: Path) -> dict[str, object]:
    """``speech_cost`` over one talk with the default model (``speech``) and with tiny.en
    (``speech_tiny_en``), and their CPU seconds per second of audio side by side
    (``speech_cpu_s_per_audio_s``; ``ratio``: the default's over tiny.en's)."""
    truth = write_talk(seconds, workdir)
    default = speech_cost(seconds, config, workdir, DEFAULT_MODEL, truth=truth)
    other = speech_cost(seconds, config, workdir, OTHER_MODEL, truth=truth)
    a, b = default["cpu_s_per_audio_s"], other["cpu_s_per_audio_s"]
    ratio = round(a / b, 2) if isinstance(a, float) and isinstance(b, float) and b else None
    return {
        "speech": default,
        "speech_tiny_en": other,
        "speech_cpu_s_per_audio_s": {DEFAULT_MODEL: a, OTHER_MODEL: b, "ratio": ratio},
    }


def write_talk(seconds: float, workdir: Path) -> SpeechTruth:
    """The talking video (``talk``), written into ``workdir``."""
    path = workdir / "talk.mp4"
    return write_speech_video(path, talk(seconds), seconds=seconds, workdir=workdir / "talk")


def speech_cost(
    seconds: float,
    config: ServiceConfig,
    workdir: Path,
    model: BundledWhisper = DEFAULT_MODEL,
    *,
    truth: SpeechTruth | None = None,
) -> dict[str, object]:
    """The speech stage with the bundled ``model`` over a video that talks for ``seconds``
    (``truth``, or one written into ``workdir``): the model's load (wall and CPU seconds, a
    fresh engine), then a warm ``SpeechStage.stream``'s CPU per second of audio (process CPU
    time: CTranslate2's threads and the VAD's are all charged) and real-time factor. The stage
    loads its own model on its first window, so it streams once before the measured run: what
    is measured is every later video's cost."""
    settings = config.asr.model_copy(update={"word_timestamps": True, "model": model})
    if truth is None:
        truth = write_talk(seconds, workdir)
    engine = AsrEngine.from_settings(settings)
    started, started_cpu = time.monotonic(), time.process_time()
    engine.load()
    load_s, load_cpu_s = time.monotonic() - started, time.process_time() - started_cpu
    engine.close()
    stage = SpeechStage(settings, config.limits)
    fetch = Pipeline.from_config(config).fetch
    video = fetch.process_batch([VideoRef(video_id="talk", uri=truth.path.resolve().as_uri())])[0]
    try:
        heard(stage.stream(video))
        started, started_cpu = time.monotonic(), time.process_time()
        items = list(stage.stream(video))
        wall_s, cpu_s = time.monotonic() - started, time.process_time() - started_cpu
    finally:
        fetch.release(video)
        stage.teardown()
    speech = heard(items)
    return {
        "model": model,
        "status": speech.status,
        "audio_s": round(speech.audio_s, 2),
        # The sentences' WAVs, espeak-ng's short silence around each included.
        "spoken_s": round(sum(u.end_s - u.start_s for u in truth.utterances), 2),
        "windows": sum(1 for item in items if isinstance(item, SpeechPart)),
        "words": sum(len(segment.words) for segment in speech.segments),
        "cpu_threads": settings.cpu_threads,
        "word_timestamps": settings.word_timestamps,
        "vad_filter": settings.vad_filter,
        "load_s": round(load_s, 2),
        "load_cpu_s": round(load_cpu_s, 2),
        "cpu_s": round(cpu_s, 2),
        "wall_s": round(wall_s, 2),
        "cpu_ms_per_audio_s": round(1000 * cpu_s / speech.audio_s, 1) if speech.audio_s else None,
        "cpu_s_per_audio_s": round(cpu_s / speech.audio_s, 4) if speech.audio_s else None,
        "real_time_factor": round(wall_s / speech.audio_s, 4) if speech.audio_s else None,
    }


# A link as an advertiser's QR code holds it (QR version 3 with the quiet zone).
QR_LINK = "https://example.com/join?from=ad2024"
QR_SIDE = 240  # px in a 720p frame: a third of its height, as ``devkit.samples`` draws one
GRAIN = 6.0  # the bench videos' film grain (``write_long_video``)
QR_BOX = [[1000, 240], [1240, 240], [1240, 480], [1000, 480]]


def qr_cost(frames: int = 8, reads: int = 5) -> dict[str, object]:
    """The ``qr`` stage's reader (``models.qr``) on ``frames`` 720p frames of the bench
    videos' texts under film grain, without a code and with one of ``QR_SIDE`` px at the
    right (grain over it too), each read ``reads`` times: the median CPU ms a read (the
    library reads on the calling thread), and the codes found."""
    pool = [scene.lines for scenes in demo_scenes().values() for scene in scenes]
    code = qr_image(QR_LINK, QR_SIDE)
    reader = QrReader()
    reader.load()
    figures: dict[str, object] = {"side_px": QR_SIDE, "frames": frames, "reads": reads}
    try:
        for name, with_code in (("without_code", False), ("with_code", True)):
            times: list[float] = []
            found = 0
            for i in range(frames):
                image = render_frame(pool[i % len(pool)], size=(1280, 720))
                if with_code:
                    top, left = (720 - QR_SIDE) // 2, 1280 - QR_SIDE - 64
                    image[top : top + QR_SIDE, left : left + QR_SIDE] = code
                noise = np.random.default_rng(i).normal(0.0, GRAIN, image.shape[:2])
                image = np.clip(image + noise[:, :, None], 0, 255).astype(np.uint8)
                for _ in range(reads):
                    started = time.process_time()
                    codes = reader.read(image)
                    times.append(time.process_time() - started)
                found += sum(1 for c in codes if c.text == QR_LINK)
            figures[name] = {
                "cpu_ms_per_frame": round(1000 * statistics.median(times), 2),
                "codes_found": found,
            }
    finally:
        reader.close()
    return figures


def review_result(seconds: int = 600) -> VideoResult:
    """What the stages before ``review`` give for a talking video of ``seconds`` sampled once
    a second: three lines on screen that change every 4 s (now and then a phone number, a
    WeChat id or a listed term among them), a sentence every 3.5 s (one in ten a phone number
    said, as Whisper writes it) and a QR code every 30 s."""
    pool = [line for scenes in demo_scenes().values() for s in scenes for line in s.lines]
    frames = []
    for second in range(seconds):
        shot = second // 4
        texts = [pool[(3 * shot + k) % len(pool)] for k in range(3)]
        if shot % 5 == 1:
            texts[1] = f"咨询热线 138 {shot:04d} 5678"
        elif shot % 5 == 3:
            texts[2] = f"微信: shop_{shot:04d}" if shot % 2 else "网上赌博 注册就送"
        lines = [
            OcrLine(text, 0.95, ((100.0, y), (900.0, y), (900.0, y + 50), (100.0, y + 50)))
            for text, y in zip(texts, (200.0, 300.0, 400.0), strict=True)
        ]
        codes = [{"text": QR_LINK, "format": "QRCode", "box": QR_BOX}] if second % 30 == 0 else []
        frames.append(Frame(second, float(second), None, ocr_lines=lines, extras={QR: codes}))
    said = [
        (start, "Call 138-1234-5678 today." if i % 10 == 9 else text)
        for i, (start, text) in enumerate(talk(float(seconds)))
    ]
    segments = tuple(SpeechSegment(at, at + 3.0, text, -0.2, 0.01) for at, text in said)
    probe = ProbeInfo("mp4", "h264", 1280, 720, 25.0, float(seconds), 1, 1, 10**8)
    return VideoResult(
        VideoRef("review-cost", "file:///review-cost.mp4"),
        "v1",
        probe,
        frames,
        datetime.now(UTC),
        speech=Speech("done", segments, language="en", audio_s=float(seconds)),
    )


def review_cost(workdir: Path, seconds: int = 600, runs: int = 5) -> dict[str, object]:
    """The ``review`` stage on ``review_result(seconds)``, with two term lists: the median
    CPU ms of ``runs`` analyses of the whole video, and what it read and found."""
    terms = workdir / "review-terms"
    terms.mkdir(parents=True, exist_ok=True)
    (terms / "gambling.txt").write_text("赌博\n博彩\ncasino\n", encoding="utf-8")
    (terms / "drugs.txt").write_text("冰毒\n大麻\ncocaine\n", encoding="utf-8")
    stage = ReviewStage(ReviewSettings(terms_dir=str(terms)))
    result = review_result(seconds)
    times: list[float] = []
    for _ in range(runs):
        started = time.process_time()
        (output,) = stage.process_batch([result])
        times.append(time.process_time() - started)
    categories = output.data["categories"]
    speech = result.speech
    return {
        "video_s": seconds,
        "samples": len(result.frames),
        "ocr_lines": sum(len(f.ocr_lines) for f in result.frames),
        "text_spans": len(text_spans(result.frames)),
        "speech_segments": len(speech.segments) if speech is not None else 0,
        "findings": {name: c["findings"] for name, c in categories.items()},
        "cpu_ms_per_video": round(1000 * statistics.median(times), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--speech-seconds", type=float, default=60.0, help="length of the talking video"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="reelsense-bench-") as tmp:
        report = measure(args.videos, args.seconds, Path(tmp), args.speech_seconds)
    emit(report, args.json)
    print(f"{speech_line(report)}; {review_line(report)}", file=sys.stderr)


def speech_line(report: dict[str, object]) -> str:
    """The two models' speech cost, and the audio events' where measured, as one line."""
    costs, events = report["speech_cpu_s_per_audio_s"], report.get("audio_events")
    assert isinstance(costs, dict)
    heard = ""
    if isinstance(events, dict):  # measured on a melody: the model's cost is that of any audio
        heard = f"; audio events {events['melody']['cpu_s_per_audio_s']}"
    return (
        f"speech CPU-s per audio-s: {DEFAULT_MODEL} {costs[DEFAULT_MODEL]}, "
        f"{OTHER_MODEL} {costs[OTHER_MODEL]} ({DEFAULT_MODEL} / {OTHER_MODEL}: {costs['ratio']})"
        f"{heard}"
    )


def review_line(report: dict[str, object]) -> str:
    """The qr stage's and the review stage's cost as one line of text."""
    qr, review = report["qr"], report["review"]
    assert isinstance(qr, dict)
    assert isinstance(review, dict)
    return (
        f"qr CPU-ms per 720p frame: {qr['without_code']['cpu_ms_per_frame']} without a code, "
        f"{qr['with_code']['cpu_ms_per_frame']} with one; review CPU-ms per video: "
        f"{review['cpu_ms_per_video']} ({review['text_spans']} text spans, "
        f"{review['speech_segments']} speech segments)"
    )


if __name__ == "__main__":
    main()
