"""Deleted rows gone from disk too, within ``storage.deletion_max_s``.

A Lance delete only marks rows deleted (a deletion file): their bytes stay in the data files,
in the indexes, and in every older version, until a compaction rewrites the fragments and the
old versions are removed. For a video taken down (a user's deletion, a legal request) that is
not enough. So a table that forgot videos purges them: a compaction that materializes every
deletion and rebuilds its indexes, half-way through what ``deletion_max_s`` leaves beside the
versions kept (deletions meanwhile share it), then, once ``keep_versions_s`` has passed (a
read in flight may still open an older version until then), the removal of the old versions
with their files. Measured with pylance 14: after both, no file under the table holds a byte
of the deleted rows' text.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import timedelta

import lance

log = logging.getLogger(__name__)


class PurgeSchedule:
    """When a table's forgotten rows are purged, and when the versions holding them go.

    A purge is scheduled from the start: a writer that starts does not know what an earlier
    one (killed, restarted) had still to purge, so it purges every table once, half a window
    after it starts."""

    def __init__(self, deletion_max_s: float, keep_versions_s: float) -> None:
        self._delay_s = max(0.0, (deletion_max_s - keep_versions_s - 1) / 2)
        self._keep_s = keep_versions_s
        self.purge_at = time.monotonic() + self._delay_s  # time.monotonic() of the next purge
        self.cleanup_at = math.inf  # of the next removal of old versions

    def forgot(self) -> None:
        self.purge_at = min(self.purge_at, time.monotonic() + self._delay_s)

    def purged(self) -> None:
        self.purge_at = math.inf
        self.cleanup_at = time.monotonic() + self._keep_s + 1

    def cleaned(self) -> None:
        self.cleanup_at = math.inf

    def failed(self) -> None:
        """The due step failed: tried again a little later."""
        later = time.monotonic() + min(60.0, max(1.0, self._delay_s))
        if self.purge_at <= self.cleanup_at:
            self.purge_at = later
        else:
            self.cleanup_at = later

    def next_in(self) -> float | None:
        """Seconds until the next step (0: due), None when nothing is scheduled."""
        due = min(self.purge_at, self.cleanup_at)
        return None if due == math.inf else max(0.0, due - time.monotonic())


def run_due(
    schedule: PurgeSchedule,
    dataset: lance.LanceDataset | None,
    keep_versions_s: float,
    *,
    name: str,
) -> None:
    """The step of ``schedule`` that is due, on ``dataset`` (None: the table is gone, so is
    what it held); a failure is logged and the step tried again a little later."""
    try:
        if schedule.purge_at <= schedule.cleanup_at:
            if dataset is not None:
                purge(dataset, keep_versions_s)
            schedule.purged()
        else:
            if dataset is not None:
                remove_old_versions(dataset, keep_versions_s)
            schedule.cleaned()
    except Exception as exc:
        log.warning("purging deleted rows of %s failed, tried again later: %s", name, exc)
        schedule.failed()


def purge(dataset: lance.LanceDataset, keep_versions_s: float) -> None:
    """Rewrite every fragment with deleted rows, rebuild the indexes without them, and drop
    the versions older than ``keep_versions_s``."""
    dataset.optimize.compact_files(materialize_deletions=True, materialize_deletions_threshold=0.0)
    dataset.optimize.optimize_indices()
    remove_old_versions(dataset, keep_versions_s)


def remove_old_versions(dataset: lance.LanceDataset, keep_versions_s: float) -> None:
    dataset.cleanup_old_versions(older_than=timedelta(seconds=keep_versions_s))
