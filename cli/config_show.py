"""``reelsense config show``: the configuration as ``reelsense serve`` runs it, every setting
with where its value came from (``core.config_sources``), secrets masked."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``config show [--config FILE] [--json]`` among ``sub``."""
    config = sub.add_parser("config", help="the configuration as the service runs it")
    actions = config.add_subparsers(dest="config_command", required=True)
    show = actions.add_parser(
        "show", help="every setting as `reelsense serve` runs it, and where it came from"
    )
    show.add_argument("--config", type=Path, help="the service's YAML")
    show.add_argument("--json", action="store_true", help="{path: {value, source}} as JSON")


def show(args: argparse.Namespace) -> int:
    """Print every setting as ``path = value  (source)``, or as JSON with ``--json``."""
    import yaml
    from pydantic import ValidationError

    from core.config import ServiceConfig
    from core.config_sources import public, settings_of
    from runtime.placement import place

    try:
        config, sources = ServiceConfig.load_sourced(args.config)
    except ValidationError as exc:
        # Named without the values given: a misspelt secret would otherwise be printed.
        for error in exc.errors(include_input=False):
            where = ".".join(str(part) for part in error["loc"])
            print(f"reelsense config show: {exc.title}: {where}: {error['msg']}", file=sys.stderr)
        return 2
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"reelsense config show: {exc}", file=sys.stderr)
        return 2
    # As the service places it: the profile fills what the user left unset.
    placement = place(config)
    sources |= placement.sources()
    settings = {
        path: {"value": public(value), "source": sources[path]}
        for path, value in settings_of(placement.config)
    }
    if args.json:
        print(json.dumps(settings, indent=2))
        return 0
    print(f"# placement: {placement.profile or 'none (runtime.executor is local)'}")
    for path, setting in settings.items():
        print(f"{path} = {json.dumps(setting['value'])}  ({setting['source']})")
    return 0
