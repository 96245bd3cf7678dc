"""A package of two stages, as a team outside the project would write it: installed beside
reelsense, found through the ``reelsense.stages`` entry points (see the ``.dist-info`` folder
beside this one), turned on by configuration (``stages.plugins``).

- ``colour`` (frames): the name of each sample's dominant colour, from its pixels.
- ``colour_runs`` (video): the stretches of the video whose samples share a colour, as
  searchable segments of kind ``colour_run`` ("blue screen from 2.0 s to 4.0 s").

And a visual detector (``squares``), found through the ``reelsense.detectors`` entry points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, Field

from core.outputs import OutputSegment, VideoOutput
from core.records import Chunk, VideoResult
from stages.base import PIXELS, Fusion, Resources, Stage, VideoStage

PALETTE = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "grey": (128, 128, 128),
    "red": (200, 30, 30),
    "green": (30, 160, 60),
    "blue": (20, 30, 60),
    "yellow": (230, 210, 40),
}


class ColourSettings(BaseModel):
    palette: tuple[str, ...] = tuple(PALETTE)  # the names it may answer with


class Colour(Stage[Chunk, Chunk]):
    """Fills ``colour``: the palette name nearest the sample's mean pixel."""

    name = "colour"
    reads = (PIXELS,)
    fills = ("colour",)
    resources = Resources(cpus=0.1)
    fusion = Fusion.PER_CORE
    settings_model = ColourSettings

    def __init__(self, settings: ColourSettings) -> None:
        self._palette = {name: np.array(PALETTE[name], float) for name in settings.palette}

    def version_params(self) -> Mapping[str, object]:
        return {"palette": sorted(self._palette)}

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        for chunk in items:
            for frame in chunk.frames:
                if frame.image is not None:
                    mean = frame.image.reshape(-1, 3).mean(axis=0)
                    nearest = min(
                        self._palette, key=lambda n: np.abs(self._palette[n] - mean).sum()
                    )
                    frame.extras["colour"] = nearest
        return list(items)


class RunSettings(BaseModel):
    min_run_s: float = Field(default=0.0, ge=0)  # shorter runs are left out
    fail_on: str | None = None  # a video id to fail on (to see a failing stage handled)


class ColourRuns(VideoStage):
    """The stretches of one colour, from the stored ``colour`` of each sample."""

    name = "colour_runs"
    reads = ("colour",)
    segment_kinds = ("colour_run",)
    searchable = ("colour_run",)
    settings_model = RunSettings

    def __init__(self, settings: RunSettings) -> None:
        self._settings = settings

    def version_params(self) -> Mapping[str, object]:
        return {"min_run_s": self._settings.min_run_s}

    def analyse(self, result: VideoResult) -> VideoOutput:
        if result.ref.video_id == self._settings.fail_on:
            raise RuntimeError("asked to fail on this video")
        frames = sorted(result.frames, key=lambda f: f.timestamp_s)
        runs: list[list[object]] = []  # [colour, start, end]
        for frame, after in zip(frames, [*frames[1:], None], strict=True):
            colour = frame.output("colour")
            end = after.timestamp_s if after is not None else result.probe.duration_s
            if runs and runs[-1][0] == colour:
                runs[-1][2] = end
            else:
                runs.append([colour, frame.timestamp_s, end])
        segments = tuple(
            OutputSegment(
                "colour_run", float(start), float(end), f"{colour} screen", {"colour": colour}
            )
            for colour, start, end in runs
            if float(end) - float(start) >= self._settings.min_run_s  # type: ignore[arg-type]
        )
        return VideoOutput({"runs": len(segments)}, segments)
