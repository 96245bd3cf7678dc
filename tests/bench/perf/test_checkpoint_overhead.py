"""The checkpoint-cost part of ``python -m bench.perf.checkpoint_overhead`` against a real Redis."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.perf.checkpoint_overhead import _checkpoint_cost


def test_checkpoint_work_is_timed_per_chunk(tmp_path: Path) -> None:
    cost = asyncio.run(_checkpoint_cost(tmp_path, chunk_frames=8, samples=20))
    assert set(cost) == {"put_p50", "mark_chunk_p50", "total_p50", "total_p95"}
    assert 0 < cost["put_p50"] <= cost["total_p50"] <= cost["total_p95"]
    assert 0 < cost["mark_chunk_p50"] <= cost["total_p50"]
    assert len(list((tmp_path / "objects").rglob("*.json"))) == 20  # one chunk per video
