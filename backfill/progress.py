"""The progress bar of a backfill: done of total, the rate, time elapsed and the ETA."""

from __future__ import annotations

from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RateBar:
    """``with RateBar("sending", total) as bar: bar.advance(n)``; ``per_minute`` shows the
    rate per minute (videos) rather than per second (events)."""

    def __init__(
        self, label: str, total: int, *, enabled: bool = True, per_minute: bool = False
    ) -> None:
        self._per_minute = per_minute
        self._progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            disable=not enabled,
        )
        self._task = self._progress.add_task(label, total=total, rate="")

    def __enter__(self) -> RateBar:
        self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def advance(self, count: int = 1) -> None:
        self._progress.update(self._task, advance=count)
        speed = self._progress.tasks[0].speed
        if speed:
            rate = f"{speed * 60:.1f}/min" if self._per_minute else f"{speed:.0f}/s"
            self._progress.update(self._task, rate=rate)
