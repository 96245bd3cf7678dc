"""A backfill on Ray Data: the selected videos, an actor pool over them, a summary.

    reelsense backfill --manifest catalogue.jsonl
    reelsense backfill --videos-table --stale --config service.yaml --workers 16

The videos become a dataset of one block each, mapped by ``BackfillWorker`` actors (one video
at a time each, so a long video holds back only its own actor); the driver follows the
outcomes as they come with a progress bar and sums them up. The actors write through the same
checkpoints and sinks as the service, so the run can be stopped at any point, even killed,
and started again: what is done is skipped, what was under way resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray
import ray.data

from backfill.progress import RateBar
from backfill.sources import BackfillItem
from backfill.summary import RunSummary
from backfill.worker import BackfillWorker
from core.config import ServiceConfig
from runtime.cluster import ray_connection

_MAX_BLOCKS = 10_000  # one video per block up to this many (Ray Data's own limits beyond)


def run_backfill(
    items: list[BackfillItem],
    config: ServiceConfig,
    *,
    progress: bool = True,
    into: RunSummary | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> RunSummary:
    """Process ``items`` on Ray Data (a local Ray, or ``ray.address``), notifying as
    ``backfill.notify`` says; their outcomes added
    to ``into``, and each video's outcome row (``backfill.worker.OUTCOME_COLUMNS``) given to
    ``on_row`` as it comes."""
    summary = into or RunSummary()
    if not items:
        return summary
    with ray_connection(config, local=config.ray.address is None):
        settings = config.backfill
        summary.workers = workers = settings.workers or _fitting(config)
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        rows = [{"event": item.event.model_dump_json(), "where": item.where} for item in items]
        videos = ray.data.from_items(rows, override_num_blocks=min(len(rows), _MAX_BLOCKS))
        outcomes = videos.map_batches(
            BackfillWorker,
            fn_constructor_kwargs={"config_json": config.to_replica_json()},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1),
            num_cpus=settings.worker_cpus,
            num_gpus=settings.worker_gpus or None,
        )
        with RateBar("backfill", len(items), enabled=progress, per_minute=True) as bar:
            for row in outcomes.iter_rows():
                summary.take(row)
                if on_row is not None:
                    on_row(row)
                bar.advance()
    return summary


def _fitting(config: ServiceConfig) -> int:
    """As many actors as the cluster's CPUs (and GPUs, when each takes some) hold."""
    settings, resources = config.backfill, ray.cluster_resources()
    count = int(resources.get("CPU", 1) // settings.worker_cpus)
    if settings.worker_gpus:
        count = min(count, int(resources.get("GPU", 0) // settings.worker_gpus))
    return max(1, count)
