"""The ``reelsense`` command.

reelsense demo                 the whole stack on this machine, sample videos, results, exit
reelsense dev                  the same stack in the foreground until Ctrl-C
reelsense serve --config FILE  connect to a real Kafka, Redis, S3 and Ray cluster
reelsense submit FILE|URI      publish an upload event (--follow: live progress per stage;
                               --upload: put FILE in the object store first)
reelsense backfill             videos from a manifest, a prefix or the videos table, processed
                               here on Ray Data (--via-service: sent to the service's bulk lane)
reelsense status ID            one video's progress (--json for machines)
reelsense result ID            a done video's shots, speech and text (--frames, --json, --vtt)
reelsense search "text"        places in videos, by meaning and by words
reelsense reindex              the text model's search table from the stored segments
reelsense dead-letters         failed events and webhooks (--replay ID: send one again)
reelsense config show          the configuration as the service runs it, with where each
                               value came from (--json for machines)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from core.speech import SOUND_KINDS

if TYPE_CHECKING:
    from core.config import ServiceConfig
    from runtime.stop_signals import StopSignals

DEFAULT_WORKDIR = Path(".reelsense")
_SERVICE_COMMANDS = frozenset({"demo", "dev", "serve"})  # those that run the service on Ray
_UNTIL_STOPPED = frozenset({"dev", "serve"})  # those that run until a stop signal


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command not in _UNTIL_STOPPED:
        return _main(args)
    from runtime.stop_signals import StopSignals

    # From here on a stop signal is a request, whenever it comes (see runtime.stop_signals).
    with StopSignals() as args.stop:
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not args.verbose and args.command in _SERVICE_COMMANDS:
        # Ray Serve narrates every deployment at INFO; the CLI shows its own progress instead.
        # Importing ray.serve sets that level, so the import comes first.
        import ray.serve  # noqa: F401

        logging.getLogger("ray.serve").setLevel(logging.WARNING)
    # Ray forks and execs its own processes after lance is imported; that is safe.
    warnings.filterwarnings("ignore", message="lance is not fork-safe")
    handler = _COMMANDS[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reelsense", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the whole stack on sample videos, print results")
    demo.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "demo")
    demo.add_argument("--videos", type=int, default=5, help="how many sample videos")
    demo.add_argument("--config", type=Path, help="YAML overrides (stages, limits, ...)")

    dev = sub.add_parser("dev", help="run the embedded stack in the foreground")
    dev.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "dev")
    dev.add_argument("--config", type=Path)

    serve = sub.add_parser("serve", help="run against a real Kafka, Redis, S3 and Ray")
    serve.add_argument("--config", type=Path, required=True)

    reindex = sub.add_parser(
        "reindex", help="fill the text model's search table from the stored segments"
    )
    reindex.add_argument("--config", type=Path, help="the service's YAML (tables, text model)")

    _submit_parser(sub)
    from cli.config_show import add_parser as config_parser

    config_parser(sub)
    _backfill_parser(sub)

    status = sub.add_parser("status", help="show one video's progress")
    status.add_argument("video_id")
    status.add_argument("--json", action="store_true")
    _endpoint_options(status)

    result = sub.add_parser("result", help="show a done video's shots, speech and text")
    result.add_argument("video_id")
    result.add_argument("--frames", action="store_true", help="also each sample's OCR lines")
    output = result.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="the API's answer as it is")
    output.add_argument(
        "--vtt",
        nargs="?",
        const="speech",
        choices=("speech", "text", "chapters"),
        help="print a WebVTT track: the transcript (default), the on-screen text or chapters",
    )
    _endpoint_options(result)

    search = sub.add_parser(
        "search", help="find places in videos by what they show and say, in any language"
    )
    search.add_argument("query")
    search.add_argument("-k", type=int, default=10, help="at most this many places")
    search.add_argument("--tenant")
    search.add_argument("--video", help="only in this video")
    search.add_argument(
        "--kind",
        action="append",
        choices=("text", "speech", "description", *SOUND_KINDS),
        help="only this kind of segment (repeatable)",
    )
    search.add_argument("--from", dest="from_s", type=float, help="places ending after (s)")
    search.add_argument("--to", dest="to_s", type=float, help="places starting before (s)")
    search.add_argument(
        "--method",
        choices=("hybrid", "vector", "text"),
        default="hybrid",
        help="hybrid (default), or by meaning or by words alone",
    )
    search.add_argument("--json", action="store_true", help="the API's answer as JSON")
    _endpoint_options(search)

    dead = sub.add_parser("dead-letters", help="list dead letters, or replay one")
    dead.add_argument("--replay", metavar="ID", help="replay the dead letter with this id")
    dead.add_argument("--limit", type=int, default=50)
    dead.add_argument("--json", action="store_true")
    _endpoint_options(dead)
    return parser


def _submit_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = sub.add_parser("submit", help="publish an upload event")
    submit.add_argument("source", help="a local file or a file://, s3:// or http(s):// URI")
    submit.add_argument("--video-id")
    submit.add_argument("--tenant", default="default")
    submit.add_argument("--callback-url")
    submit.add_argument("--follow", action="store_true", help="show live progress until done")
    submit.add_argument(
        "--upload",
        action="store_true",
        help="put FILE into the object store (storage.object_store_uri) and submit its URI: "
        "for a service that cannot read this machine's files (a container, a cluster)",
    )
    submit.add_argument(
        "--config", type=Path, help="the service's YAML: its object store and its topic"
    )
    submit.add_argument(
        "--bulk",
        action="store_true",
        help="publish to the bulk lane (kafka.bulk_topic): processed in the room fresh "
        "uploads leave",
    )
    submit.add_argument(
        "--s3-endpoint",
        help="the object store's S3 endpoint as this machine reaches it "
        "(the compose stack's MinIO: http://localhost:9000)",
    )
    _endpoint_options(submit)


def _backfill_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "backfill", help="process videos that did not come as uploads, in the bulk lane"
    )
    parser.add_argument(
        "--via-service",
        action="store_true",
        help="send each video's event to the running service's bulk lane (kafka.bulk_topic) "
        "instead of processing the videos here on Ray Data",
    )
    parser.add_argument("--workers", type=int, help="Ray Data actors (default: one per CPU)")
    parser.add_argument(
        "--notify",
        action=argparse.BooleanOptionalAction,
        help="send webhooks and status messages for the videos (default: backfill.notify)",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--manifest", help="JSONL or Parquet: id, uri, tenant, metadata")
    source.add_argument("--prefix", help="every video file under a folder or s3:// prefix")
    source.add_argument(
        "--videos-table", action="store_true", help="the videos the service has processed"
    )
    parser.add_argument("--tenant", help="the tenant of a prefix's videos; filters the table")
    parser.add_argument(
        "--stale", action="store_true", help="table: only those of another pipeline version"
    )
    parser.add_argument("--since", type=datetime.fromisoformat, help="table: completed since")
    parser.add_argument("--until", type=datetime.fromisoformat, help="table: completed before")
    parser.add_argument("--limit", type=int, help="at most this many videos")
    parser.add_argument("--dry-run", action="store_true", help="select and summarise only")
    parser.add_argument("--json", action="store_true", help="the summary as JSON")
    parser.add_argument(
        "--config", type=Path, help="the service's YAML: topics, tables, object store"
    )
    parser.add_argument("--s3-endpoint", help="the object store's endpoint from this machine")
    parser.add_argument("--bootstrap", help="Kafka bootstrap (default: the config's)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "dev")


def _endpoint_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR / "dev",
        help="a running `reelsense dev` stack to talk to",
    )
    parser.add_argument("--api", help="API base URL (default: the dev stack's)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap (default: the dev stack's)")
    parser.add_argument("--token", default=os.environ.get("REELSENSE_TOKEN"))


def _demo(args: argparse.Namespace) -> int:
    from devkit.demo import run_demo

    return run_demo(args.workdir, videos=args.videos, config_path=args.config)


def _dev(args: argparse.Namespace) -> int:
    from core.config import ServiceConfig
    from devkit.stack import EmbeddedStack

    base = ServiceConfig.load(args.config)
    stop: StopSignals = args.stop
    with EmbeddedStack(args.workdir) as stack:
        if stop.requested:  # stopped while the broker and Redis started
            return 0
        config = stack.config(base)
        print(f"broker {stack.bootstrap}  redis {stack.redis_url}  API {stack.api_url}")
        print("submit videos with: reelsense submit FILE --follow   (Ctrl-C stops)")
        return _run_service(config, stop, local_ray=True)


def _serve(args: argparse.Namespace) -> int:
    from core.api_settings import InsecureConfig
    from core.config import ServiceConfig

    config = ServiceConfig.load(args.config)
    try:
        config.refuse_left_open()
    except InsecureConfig as exc:
        print(f"reelsense serve: {exc}", file=sys.stderr)
        return 2
    if config.redis.require_durable:  # the service checks too; here it is before Ray starts
        from checkpoint.errors import CheckpointNotDurable, CheckpointUnavailable

        try:
            asyncio.run(_check_durability(config))
        except CheckpointNotDurable as exc:
            print(f"reelsense serve: {exc}", file=sys.stderr)
            return 2
        except CheckpointUnavailable as exc:
            print(f"reelsense serve: redis is unreachable: {exc}", file=sys.stderr)
            return 1
    stop: StopSignals = args.stop
    if stop.requested:
        return 0
    return _run_service(config, stop, local_ray=config.ray.address is None)


async def _check_durability(config: ServiceConfig) -> None:
    from checkpoint.redis_store import RedisCheckpointStore

    store = RedisCheckpointStore(config.redis)
    try:
        await store.check_durability()
    finally:
        await store.close()


def _run_service(config: ServiceConfig, stop: StopSignals, *, local_ray: bool) -> int:
    """The service until a stop signal, whenever it comes (see ``runtime.stop_signals``)."""
    from runtime.cluster import ray_connection
    from runtime.service import ReelsenseService

    with ray_connection(config, local=local_ray):
        if stop.requested:  # during Ray's start
            return 0
        service = ReelsenseService(config)

        async def serve_until_signal() -> None:
            with stop.in_loop(service.request_stop):
                await service.run()

        asyncio.run(serve_until_signal())
    return 0


def _submit(args: argparse.Namespace) -> int:
    from cli.client import SubmitFailed, follow, submit

    try:
        video_id = asyncio.run(submit(args))
    except SubmitFailed as exc:
        print(f"reelsense submit: {exc}", file=sys.stderr)
        return exc.exit_code
    print(video_id)
    return asyncio.run(follow(args, video_id)) if args.follow else 0


def _backfill(args: argparse.Namespace) -> int:
    from cli.backfill import run

    return run(args)


def _status(args: argparse.Namespace) -> int:
    from cli.client import show_status

    return show_status(args)


def _result(args: argparse.Namespace) -> int:
    from cli.client import show_result

    return show_result(args)


def _search(args: argparse.Namespace) -> int:
    from cli.client import show_search

    return show_search(args)


def _reindex(args: argparse.Namespace) -> int:
    from core.config import ServiceConfig
    from models.embedding import text_embedder
    from sinks.reindex import reindex
    from sinks.search import LanceSearchIndex
    from sinks.segments import LanceSegmentSink

    config = ServiceConfig.load(args.config)
    stages = config.stages
    model = text_embedder(stages.embed.model, threads=stages.embed.threads)
    index = LanceSearchIndex.from_settings(config.storage, model)
    index.open()
    try:
        done = reindex(index, LanceSegmentSink.from_settings(config.storage))
        index.refresh()
    finally:
        index.close()
    print(
        f"{done.table}: {done.videos} videos ({done.rows} segments) written, "
        f"{done.skipped} already there, {done.seconds} s"
    )
    return 0


def _config(args: argparse.Namespace) -> int:
    from cli.config_show import show

    return show(args)


def _dead_letters(args: argparse.Namespace) -> int:
    from cli.client import show_dead_letters

    return show_dead_letters(args)


_COMMANDS = {
    "demo": _demo,
    "dev": _dev,
    "serve": _serve,
    "submit": _submit,
    "backfill": _backfill,
    "status": _status,
    "result": _result,
    "search": _search,
    "reindex": _reindex,
    "dead-letters": _dead_letters,
    "config": _config,
}


if __name__ == "__main__":
    sys.exit(main())
