"""The reduced crash soak (``bench.soak.chaos``): 12 videos, 3 kill -9s of the service, one lost
OCR replica, one broker restart, one Redis restart, a poison re-send of a done video and a
source that drips for ever. Nothing lost, nothing doubled, the hostile records refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.chaos import run_chaos
from bench.soak.chaos_plan import ChaosOptions

# The deadline is for every video to become final; on an idle machine the soak ends well before
# it (it stops as soon as every video is final), but every kill costs a service start (Ray, the
# stage pools, the models) and a loaded 2-core machine stretches those.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


async def test_reduced_soak(tmp_path: Path) -> None:
    options = ChaosOptions(
        videos=12,
        kills=3,
        replica_kills=1,
        broker_bounces=1,
        redis_bounces=1,
        rebalance=False,  # tests/recovery/test_rebalance.py joins and leaves a consumer
        poisons=1,
        drips=1,
        seed=3,
        workdir=tmp_path,
        timeout_s=720,
        max_seconds=8.0,
    )
    report = await run_chaos(options)

    assert report["videos_done"] == report["videos"] == 12, report
    assert report["missing_rows"] == 0, report
    assert report["duplicate_rows"] == 0, report
    assert report["lost_webhooks"] == 0, report
    assert report["duplicate_webhook_ids"] == 0, report
    assert report["kills"] == 3, report
    assert report["poisons"] == 1, report
    assert report["poison_not_dead_lettered"] == [], report
    assert report["poison_reasons"] == ["event_invalid"], report
    assert report["drip_outcomes"] == {"drip-0": "failed:fetch_timeout"}, report
    # At most one chunk computed twice per kill and video in flight.
    assert report["redone_chunks"] <= report["kills"] * report["max_in_flight"], report
    assert report["redone_chunks"] <= report["redone_bound"], report
    assert report["failures"] == [], report
