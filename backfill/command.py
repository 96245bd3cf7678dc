"""``reelsense backfill``: choose the videos, send them to the service's bulk lane, summarise.

    reelsense backfill --via-service --manifest videos.jsonl
    reelsense backfill --via-service --prefix s3://catalogue/2019/ --tenant archive
    reelsense backfill --via-service --videos-table --stale --config service.yaml

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

from backfill.publish import Summary, select, send
from backfill.sources import (
    BackfillItem,
    Selection,
    Skipped,
    from_manifest,
    from_prefix,
    from_videos_table,
)
from cli.client import SubmitFailed, client_config, endpoint
from core.config import ServiceConfig


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
    if not args.via_service:
        print("reelsense backfill: say how to run it: --via-service", file=sys.stderr)
        return 2
    try:
        config = client_config(args)
    except SubmitFailed as exc:
        print(f"reelsense backfill: {exc}", file=sys.stderr)
        return exc.exit_code
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
        for entry in skipped[:20]:
            print(f"  skipped {entry.where}: {entry.reason}")
        if len(skipped) > 20:
            print(f"  ... and {len(skipped) - 20} more (--json lists them all)")
    return 0
