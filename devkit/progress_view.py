"""Terminal rendering of per-video progress: one row per video, a bar per stage."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table

from checkpoint.base import StageProgress, VideoState, VideoStatus
from core.stage_names import ALL

_BAR = 12


def stage_bar(progress: StageProgress) -> str:
    """``done/total`` behind a bar; ``n/a`` for a stage with nothing to do for the video (the
    speech of a video without audio), which counts as finished: a full bar, dimmed."""
    if not progress.applicable:
        return f"[dim]{'█' * _BAR} n/a[/dim]"
    if not progress.total:
        return f"{progress.done}/?"
    filled = round(_BAR * min(progress.done, progress.total) / progress.total)
    return f"{'█' * filled}{'░' * (_BAR - filled)} {progress.done}/{progress.total}"


def progress_table(statuses: Iterable[VideoStatus]) -> Table:
    rows = list(statuses)
    named = dict.fromkeys([*ALL, *(s for status in rows for s in status.stages)])
    stages = [s for s in named if any(s in status.stages for status in rows)]
    table = Table(show_header=True, header_style="bold", box=None)
    table.add_column("video")
    table.add_column("status")
    for stage in stages:
        table.add_column(stage)
    for status in rows:
        colour = {
            VideoState.DONE: "green",
            VideoState.FAILED: "red",
            VideoState.RUNNING: "yellow",
        }.get(status.status, "white")
        cells = [stage_bar(status.stages[s]) if s in status.stages else "" for s in stages]
        label = status.status.value
        if status.status is VideoState.FAILED and status.error_code:
            label += f" ({status.error_code})"
        table.add_row(status.video_id, f"[{colour}]{label}[/{colour}]", *cells)
    return table


def is_final(status: VideoStatus | None) -> bool:
    return status is not None and status.status in (VideoState.DONE, VideoState.FAILED)
