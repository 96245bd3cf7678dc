"""What a backfill reports: the source's entries it skipped, and what became of the videos."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from backfill.sources import Skipped


@dataclass
class Skips:
    """The source's entries that were not videos to process, each with where and why."""

    skipped: list[Skipped] = field(default_factory=list)

    def skipped_report(self) -> dict[str, Any]:
        return {
            "skipped": len(self.skipped),
            "skipped_entries": [{"where": s.where, "reason": s.reason} for s in self.skipped],
        }


@dataclass
class Summary(Skips):
    """A backfill through the service: events sent, and the source's entries skipped."""

    sent: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, **self.skipped_report()}


@dataclass
class RunSummary(Skips):
    """A backfill run here: each video's outcome, the failures' reasons, frames decoded."""

    outcomes: Counter[str] = field(default_factory=Counter)
    failed: list[dict[str, str]] = field(default_factory=list)
    frames_decoded: int = 0
    workers: int = 0

    def take(self, row: dict[str, Any]) -> None:
        """One video's outcome row (``backfill.worker.OUTCOME_COLUMNS``)."""
        outcome = str(row["outcome"])
        self.outcomes[outcome] += 1
        self.frames_decoded += int(row["frames_decoded"])
        if outcome in ("failed", "error"):
            self.failed.append(
                {key: str(row[key]) for key in ("video_id", "where", "outcome", "reason")}
            )

    def as_dict(self) -> dict[str, Any]:
        return {
            "done": self.outcomes["done"],
            # settled before this run, by the service or an earlier run
            "already_done": self.outcomes["skipped"] + self.outcomes["stale"],
            "failed": len(self.failed),
            "failures": self.failed,
            "frames_decoded": self.frames_decoded,
            "workers": self.workers,
            **self.skipped_report(),
        }
