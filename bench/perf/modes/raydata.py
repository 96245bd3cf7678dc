"""Ray Data batch pipeline: read the list of videos, ``map_batches`` per stage on actor pools,
write Lance. The same stage classes as the service.

    python -m bench.perf.modes.raydata SPEC OUT

``spec.setting`` holds the knobs a user would tune (see ``SETTINGS`` in ``bench.perf.pipeline``):
frames per output block of the decoder, per-stage actor count, fractional CPUs per actor,
batch size, library threads per actor. Every UDF call appends its span to a file per actor, so
the timeline shows each actor's activity.

With ``spec.speech`` a second branch maps the video rows through the speech stage (one row per
video: what was said), on actors of its own, and is unioned with the frames before the sink,
so one job runs both; the sink writes each kind of row to a table of its own.

Results are visible once ``write_lance`` commits, at the end of the job: that is when every
video of the batch is done.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench.perf.modes.common import (
    Activity,
    ModeResult,
    RunSpec,
    cores,
    local_config,
    mode_main,
    now,
    start_local_ray,
)
from core.config import ServiceConfig
from core.records import Chunk, Frame, OcrLine, VideoRef
from core.speech import heard
from stages.embed import EmbedStage
from stages.pipeline import Pipeline

Batch = dict[str, Any]


class _Spans:
    """Appends (stage, start, end, items) lines to a file of this actor's own."""

    def __init__(self, folder: str, stage: str) -> None:
        self._path = Path(folder) / f"{stage}-{os.getpid()}.jsonl"
        self._stage = stage

    def add(self, start: float, items: int) -> None:
        line = json.dumps({"stage": self._stage, "start": start, "end": now(), "items": items})
        with self._path.open("a") as out:
            out.write(line + "\n")


class DecodeUdf:
    """video rows -> frame rows, ``frames_per_block`` frames per output batch."""

    def __init__(self, config_json: str, spans: str, frames_per_block: int) -> None:
        config = ServiceConfig.model_validate_json(config_json)
        # A Ray Data pipeline analyses every sampled frame: each row carries its pixels.
        stages = config.stages.model_copy(update={"repeat_max_change": 0.0})
        config = config.model_copy(update={"stages": stages})
        pipeline = Pipeline.from_config(config)
        self._fetch, self._decode = pipeline.fetch, pipeline.decode
        self._fetch.setup()
        self._decode.setup()
        self._per_block = frames_per_block
        self._spans = _Spans(spans, "decode")

    def __call__(self, batch: Batch) -> Iterator[Batch]:
        for video_id, uri in zip(batch["video_id"], batch["uri"], strict=True):
            start = now()
            video = self._fetch.process_batch([VideoRef(video_id=str(video_id), uri=str(uri))])[0]
            pending: list[Frame] = []
            for chunk in self._decode.stream(video):
                pending.extend(chunk.frames)
                while len(pending) >= self._per_block:
                    block, pending = pending[: self._per_block], pending[self._per_block :]
                    self._spans.add(start, len(block))
                    yield _frames_batch(str(video_id), block)
                    start = now()
            if pending:
                self._spans.add(start, len(pending))
                yield _frames_batch(str(video_id), pending)
            self._fetch.release(video)


def _frames_batch(video_id: str, frames: list[Frame]) -> Batch:
    return {
        "video_id": np.array([video_id] * len(frames)),
        "frame_index": np.array([f.index for f in frames], dtype=np.int64),
        "timestamp_s": np.array([f.timestamp_s for f in frames], dtype=np.float64),
        "image": np.stack([f.image for f in frames if f.image is not None]),
    }


def _frames_of(batch: Batch, *, images: bool) -> list[Frame]:
    count = len(batch["video_id"])
    return [
        Frame(
            index=int(batch["frame_index"][i]),
            timestamp_s=float(batch["timestamp_s"][i]),
            image=batch["image"][i] if images else None,
            ocr_lines=[OcrLine(t, 1.0, ()) for t in json.loads(batch["ocr"][i])]
            if "ocr" in batch
            else [],
        )
        for i in range(count)
    ]


class OcrUdf:
    """frame rows with pixels -> frame rows with the text read, pixels dropped."""

    def __init__(self, config_json: str, spans: str) -> None:
        stage = Pipeline.from_config(ServiceConfig.model_validate_json(config_json)).image_stages[0]
        stage.setup()
        self._stage = stage
        self._spans = _Spans(spans, "ocr")

    def __call__(self, batch: Batch) -> Batch:
        start = now()
        frames = _frames_of(batch, images=True)
        self._stage.process_batch([Chunk("batch", 0, frames)])
        self._spans.add(start, len(frames))
        return {
            "video_id": batch["video_id"],
            "frame_index": batch["frame_index"],
            "timestamp_s": batch["timestamp_s"],
            "ocr": np.array([json.dumps([line.text for line in f.ocr_lines]) for f in frames]),
        }


class EmbedUdf:
    """frame rows with text -> rows with a text embedding (zeros where there is no text)."""

    def __init__(self, config_json: str, spans: str) -> None:
        embed = Pipeline.from_config(ServiceConfig.model_validate_json(config_json)).embed
        assert isinstance(embed, EmbedStage)
        embed.setup()
        self._stage = embed
        self._spans = _Spans(spans, "embed")

    def __call__(self, batch: Batch) -> Batch:
        start = now()
        frames = _frames_of(batch, images=False)
        self._stage.process_batch([Chunk("batch", 0, frames)])
        vectors = np.zeros((len(frames), self._stage.dimension), dtype=np.float32)
        for i, frame in enumerate(frames):
            if frame.embedding is not None:
                vectors[i] = frame.embedding
        self._spans.add(start, len(frames))
        return {**batch, "embedding": vectors}


class SpeechUdf:
    """video rows -> one row per video with what was said: the speech stage on the fetched
    file, as the service runs it beside decoding."""

    def __init__(self, config_json: str, spans: str, warmup: str | None) -> None:
        pipeline = Pipeline.from_config(ServiceConfig.model_validate_json(config_json))
        assert pipeline.speech is not None
        self._fetch, self._speech = pipeline.fetch, pipeline.speech
        self._fetch.setup()
        self._speech.setup()
        if warmup:  # the model loads on the first audio track: here, not in the first call
            self._said("warmup", Path(warmup).as_uri())
        self._spans = _Spans(spans, "speech")

    def _said(self, video_id: str, uri: str) -> str:
        video = self._fetch.process_batch([VideoRef(video_id=video_id, uri=uri)])[0]
        try:
            return heard(self._speech.stream(video)).text
        finally:
            self._fetch.release(video)

    def __call__(self, batch: Batch) -> Batch:
        said = []
        for video_id, uri in zip(batch["video_id"], batch["uri"], strict=True):
            start = now()
            said.append(self._said(str(video_id), str(uri)))
            self._spans.add(start, 0)
        return {"video_id": np.array(batch["video_id"], dtype=str), "speech": np.array(said)}


class LanceFrames:
    """A Ray Data sink writing Lance: a fragment per write task, one commit per table at the
    end. Rows with a ``speech`` column go to ``speech_uri``, the others to ``uri``.

    It does what ``Dataset.write_lance`` does; that one fails with pylance 14 (Ray 2.60 passes
    ``storage_options_provider`` to ``write_fragments``, which pylance 14 does not take).
    """

    @staticmethod
    def create(uri: str, speech_uri: str | None = None) -> Any:
        import lance
        import pyarrow as pa
        from lance.fragment import write_fragments
        from ray.data import Datasink

        class _Sink(Datasink[list[Any]]):  # type: ignore[misc]  # ray is Any to mypy here
            def write(self, blocks: Any, ctx: Any) -> list[Any]:
                written: list[Any] = []
                for block in blocks:
                    table = block if isinstance(block, pa.Table) else pa.Table.from_pandas(block)
                    target = speech_uri if "speech" in table.column_names else uri
                    if table.num_rows and target is not None:
                        written.append((target, write_fragments(table, target), table.schema))
                return written

            def on_write_complete(self, write_result: Any) -> None:
                tables: dict[str, tuple[list[Any], Any]] = {}
                for task in write_result.write_returns:
                    for target, frags, table_schema in task:
                        fragments, schema = tables.setdefault(target, ([], table_schema))
                        fragments.extend(frags)
                for target, (fragments, schema) in tables.items():
                    operation = lance.LanceOperation.Overwrite(schema, fragments)
                    lance.LanceDataset.commit(target, operation)

        return _Sink()


def run(spec: RunSpec) -> ModeResult:
    import ray

    setting = spec.setting
    cpus = float(setting.get("cpus", cores()))
    config = local_config(
        spec,
        ocr_threads=int(setting.get("ocr_threads", 1)),
        embed_threads=int(setting.get("embed_threads", 1)),
        decode_threads=int(setting.get("decode_threads", 1)),
    )
    config_json = config.model_dump_json()
    spans = Path(spec.workdir) / "spans"
    spans.mkdir(parents=True, exist_ok=True)
    manifest = Path(spec.workdir) / "videos.jsonl"
    manifest.write_text(
        "".join(
            json.dumps({"video_id": v.video_id, "uri": Path(v.path).as_uri()}) + "\n"
            for v in spec.videos
        )
    )
    started = time.monotonic()
    start_local_ray(spec, int(cpus))
    try:
        import ray.data

        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.verbose_stats_logs = False
        setup_s = time.monotonic() - started
        window_start = now()
        videos = ray.data.read_json(
            str(manifest), ray_remote_args={"num_cpus": 0.05}, override_num_blocks=len(spec.videos)
        )
        frames = videos.map_batches(
            DecodeUdf,
            fn_constructor_args=(
                config_json,
                str(spans),
                int(setting.get("frames_per_block", spec.chunk_frames)),
            ),
            batch_size=1,
            concurrency=int(setting.get("decode_actors", 1)),
            num_cpus=float(setting.get("decode_cpus", 0.5)),
        )
        read = frames.map_batches(
            OcrUdf,
            fn_constructor_args=(config_json, str(spans)),
            batch_size=int(setting.get("ocr_batch", 8)),
            concurrency=int(setting.get("ocr_actors", 1)),
            num_cpus=float(setting.get("ocr_cpus", 0.5)),
        )
        embedded = read.map_batches(
            EmbedUdf,
            fn_constructor_args=(config_json, str(spans)),
            batch_size=int(setting.get("embed_batch", 32)),
            concurrency=1,
            num_cpus=float(setting.get("embed_cpus", 0.2)),
        )
        table = str(Path(spec.workdir) / "frames.lance")
        speech_table = str(Path(spec.workdir) / "speech.lance") if spec.speech else None
        if speech_table is not None:
            said = videos.map_batches(
                SpeechUdf,
                fn_constructor_args=(config_json, str(spans), spec.warmup),
                batch_size=1,
                concurrency=int(setting.get("speech_actors", 1)),
                # Little: the settings' actors leave 0.05-0.1 CPU of 2 to the read and write
                # tasks, and with none left those wait for resources forever.
                num_cpus=float(setting.get("speech_cpus", 0.05)),
            )
            embedded = embedded.union(said)
        embedded.write_datasink(
            LanceFrames.create(table, speech_table), ray_remote_args={"num_cpus": 0.05}
        )
        window_end = now()
    finally:
        ray.shutdown()
    import lance

    rows = lance.dataset(table).count_rows()
    timeline = _read_spans(spans)
    # Measured from the first stage call: actor start-up and model loading, which a batch job
    # pays on every run, are left out (the other modes are measured warm as well).
    job_start, window_start = window_start, min((a.start for a in timeline), default=window_start)
    extra: dict[str, Any] = {"job_wall_s": round(window_end - job_start, 3)}
    if speech_table is not None:  # a row per video: the speech stage ran on each
        extra["speech_rows"] = lance.dataset(speech_table).count_rows()
    return ModeResult(
        mode=spec.mode,
        setting=dict(setting),
        window_start=window_start,
        window_end=window_end,
        submitted={v.video_id: window_start for v in spec.videos},
        done={v.video_id: window_end for v in spec.videos},  # visible at the commit
        frames=rows,
        setup_s=setup_s + window_start - job_start,
        timeline=timeline,
        extra=extra,
    )


def _read_spans(folder: Path) -> list[Activity]:
    timeline: list[Activity] = []
    for path in sorted(folder.glob("*.jsonl")):
        lane = path.stem  # stage-pid
        for line in path.read_text().splitlines():
            span = json.loads(line)
            timeline.append(
                Activity(lane, span["stage"], span["start"], span["end"], span["items"])
            )
    return timeline


if __name__ == "__main__":
    mode_main(run)
