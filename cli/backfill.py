"""``reelsense backfill``: choose the videos, process them on Ray Data or send them to the
service's bulk lane, summarise.

    reelsense backfill --manifest videos.jsonl --config service.yaml
    reelsense backfill --videos-table --stale --config service.yaml --workers 16
    reelsense backfill --via-service --prefix s3://catalogue/2019/ --tenant archive

``--videos-table --stale`` picks the finished videos whose pipeline version is not the current
one: after a stage is added or changed, the service then reuses every stage output that did not
change (``runtime.reuse``), so adding speech decodes no frame.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from aiokafka.errors import KafkaError

from backfill.publish import select, send
from backfill.sources import (
    BackfillItem,
    Selection,
    Skipped,
    from_manifest,
    from_prefix,
    from_videos_table,
)
from backfill.summary import RunSummary, Summary
from cli.client import SubmitFailed, client_config, endpoint
from core.config import ServiceConfig
from devkit.stack import read_state, stack_config


def entries(args: argparse.Namespace, config: ServiceConfig) -> Iterator[BackfillItem | Skipped]:
    if args.manifest:
        return from_manifest(Path(args.manifest))
    if args.prefix:
        return from_prefix(args.prefix, config.storage, tenant=args.tenant or "default")
    not_version = None
    if args.stale:
        from stages.pipeline import Pipeline

        not_version = Pipeline.from_config(config).version
    selection = Selection(args.tenant, not_version, args.since, args.until)
    return from_videos_table(config.storage, selection)


def run(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
    except SubmitFailed as exc:
        print(f"reelsense backfill: {exc}", file=sys.stderr)
        return exc.exit_code
    if not args.via_service:
        return _on_ray_data(args, config)
    topic = config.kafka.bulk_topic
    if topic is None:
        print("reelsense backfill: no bulk lane (kafka.bulk_topic) is set", file=sys.stderr)
        return 2
    try:
        items, skipped = select(entries(args, config), args.limit)
    except OSError as exc:
        print(f"reelsense backfill: cannot read the source: {exc}", file=sys.stderr)
        return 2
    summary = Summary(skipped=skipped)
    if not args.dry_run and items:
        bootstrap = args.bootstrap or (config.kafka.bootstrap if args.config else None)
        bootstrap = bootstrap or endpoint(args, "bootstrap")
        try:
            summary.sent = asyncio.run(
                send(items, bootstrap=bootstrap, topic=topic, progress=not args.json)
            )
        except (KafkaError, OSError) as exc:
            print(f"reelsense backfill: cannot publish to {bootstrap}: {exc}", file=sys.stderr)
            return 1
    report = {**summary.as_dict(), "selected": len(items), "topic": topic}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"selected {len(items)}, sent {summary.sent} to {topic}, skipped {len(skipped)}")
        _print_skipped(skipped)
    return 0


def _print_skipped(skipped: list[Skipped]) -> None:
    for entry in skipped[:20]:
        print(f"  skipped {entry.where}: {entry.reason}")
    if len(skipped) > 20:
        print(f"  ... and {len(skipped) - 20} more (--json lists them all)")


def _config(args: argparse.Namespace) -> ServiceConfig:
    """``--config``; else the running ``reelsense dev`` stack's, if there is one."""
    config = client_config(args)
    state = None if args.config else read_state(args.workdir)
    if state is not None and "redis" in state:
        config = stack_config(args.workdir, state, config)
    given = {"workers": args.workers, "notify": args.notify}
    update = {name: value for name, value in given.items() if value is not None}
    if update:
        backfill = config.backfill.model_copy(update=update)
        config = config.model_copy(update={"backfill": backfill})
    return config


def _on_ray_data(args: argparse.Namespace, config: ServiceConfig) -> int:
    """The videos processed here, on Ray Data (``backfill.runner``)."""
    from backfill.runner import run_backfill

    try:
        items, skipped = select(entries(args, config), args.limit)
    except OSError as exc:
        print(f"reelsense backfill: cannot read the source: {exc}", file=sys.stderr)
        return 2
    summary = RunSummary(skipped=skipped)
    if not args.dry_run:
        summary = run_backfill(items, config, progress=not args.json, into=summary)
    report = {**summary.as_dict(), "selected": len(items), "notify": config.backfill.notify}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"selected {len(items)}: done {report['done']}, already done "
            f"{report['already_done']}, failed {report['failed']}; "
            f"frames decoded {report['frames_decoded']}; skipped entries {len(skipped)}"
        )
        for failure in summary.failed[:20]:
            print(f"  failed {failure['video_id']} ({failure['where']}): {failure['reason']}")
        _print_skipped(skipped)
    return 1 if summary.failed else 0
