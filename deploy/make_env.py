"""Write the secrets of deploy/docker-compose.yaml, every one made fresh and random:

    python3 deploy/make_env.py > deploy/.env
    python3 deploy/make_env.py --tenant acme --tenant globex > deploy/.env

The Redis password, the MinIO (S3) keys, a Standard Webhooks secret and one API token per
tenant, in the keys deploy/env.example documents. What it writes passes the service's start-up
checks (no empty webhook secret, no short or placeholder token), so the compose stack starts
as it is. Python's standard library only: run it before anything is installed. Each token is
printed once, to stderr, for the tenant's client.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import sys
from collections.abc import Sequence


def env_lines(tenants: Sequence[str]) -> list[str]:
    """The lines of a deploy/.env for ``tenants``, each value new."""
    webhook = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    tokens = {tenant: [secrets.token_urlsafe(32)] for tenant in tenants}
    values = {
        "REELSENSE_REDIS_PASSWORD": secrets.token_urlsafe(24),
        "REELSENSE_STORAGE_S3_ACCESS_KEY_ID": "reelsense-" + secrets.token_hex(4),
        "REELSENSE_STORAGE_S3_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
        "REELSENSE_NOTIFY_WEBHOOK_SECRETS": json.dumps([webhook]),
        "REELSENSE_API_TENANT_TOKENS": json.dumps(tokens, separators=(",", ":")),
    }
    # Single quotes: the JSON values hold double quotes; none of the values holds a single one.
    return [f"{key}='{value}'" for key, value in values.items()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--tenant", action="append", help="a tenant to make an API token for (default: acme)"
    )
    args = parser.parse_args(argv)
    tenants = args.tenant or ["acme"]
    lines = env_lines(tenants)
    print("# Made by deploy/make_env.py: every value is random. Keep this file secret.")
    print("\n".join(lines))
    tokens = json.loads(lines[-1].split("=", 1)[1].strip("'"))
    for tenant, (token,) in tokens.items():
        print(f"API token of tenant {tenant}: {token}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
