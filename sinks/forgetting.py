"""Deleted videos forgotten by every sink, through the one writer, and purged later.

The writer runs a deletion in its own thread after the writes submitted before it, so a result
already on its way lands first and is removed with the rest, never after. Each sink removes
what it holds of the videos (rows, documents, thumbnails); the Lance tables then purge the
rows' bytes from disk within ``storage.deletion_max_s`` (``sinks.lance_purge``), a step the
writer runs whenever one is due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from core.errors import ReelsenseError
from core.records import VideoRef
from sinks.base import Sink
from sinks.errors import as_sink_error

log = logging.getLogger("sinks.writer")

# A purge step that could not run (the lease was elsewhere) is looked at again this soon.
_RETRY_S = 60.0


def forget_everywhere(
    sinks: Sequence[Sink],
    videos: Sequence[VideoRef],
    fence: Callable[[], None],
    open_sink: Callable[[Sink], None],
) -> ReelsenseError | None:
    """Every sink forgets ``videos``, each right after ``fence``; the first error, if any
    (the deletion is retried whole: forgetting again is harmless)."""
    for sink in sinks:
        try:
            fence()
            open_sink(sink)
            sink.forget(videos)
        except Exception as exc:
            return as_sink_error(exc, sink.name)
    return None


def purge_due(sinks: Sequence[Sink], fence: Callable[[], None]) -> float | None:
    """Each sink's purge step that is due, run after ``fence``; seconds until the next one
    (None: none is scheduled)."""
    due: list[float] = []
    for sink in sinks:
        left = sink.purge_in()
        try:
            if left == 0:
                fence()
                left = sink.purge()
        except Exception as exc:
            log.warning("purge of %s not run now: %s", sink.name, exc)
            left = _RETRY_S
        if left is not None:
            due.append(left)
    return min(due, default=None)
