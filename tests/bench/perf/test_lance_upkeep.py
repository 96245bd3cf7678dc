"""``python -m bench.perf.lance_upkeep --quick`` end to end: what upkeep must bound, it bounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.perf.lance_upkeep import POLICIES, READS, main

TABLES = ("search", "videos")


def test_quick_run_bounds_fragments_and_versions_only_with_upkeep(tmp_path: Path) -> None:
    out = tmp_path / "upkeep.json"
    assert main(["--quick", "--json", str(out), "--workdir", str(tmp_path / "tables")]) == 0
    report = json.loads(out.read_text())
    headline, runs = report["headline"], report["runs"]
    assert set(runs) == set(POLICIES)
    for name in POLICIES:
        assert set(headline[f"reads_p95_ms_{name}"]) == set(READS)
        for key in ("fragments", "versions", "bytes"):
            assert set(headline[f"{key}_{name}"]) == set(TABLES)
        assert 0 <= headline[f"upkeep_share_of_write_time_{name}"] < 1
    assert set(headline["read_speedup"]) == set(headline["read_speedup_run_median"]) == set(READS)

    # Every policy wrote the same rows with the same commits.
    ends = {name: run["timeline"][-1]["tables"] for name, run in runs.items()}
    for table in TABLES:
        assert len({end[table]["rows"] for end in ends.values()}) == 1
    commits = runs["no_upkeep"]["commits"]
    assert all(run["commits"] == commits for run in runs.values())

    # Compaction runs every ``compact_every`` commits of a table, or sooner (an eighth of them
    # at least after the last) once the table has piled up fragments; never with it off.
    for run in runs.values():
        every = run["policy"]["compact_every"]
        for table in TABLES:
            count = run["compactions"][table]["count"]
            if not every:
                assert count == 0
            else:
                assert commits[table] // every <= count <= commits[table] // max(1, every // 8)

    # Without it, every final write leaves a fragment for good; with it, they stay few.
    plain = _fragments(runs["no_upkeep"], "search")
    assert plain[-1] >= commits["videos"]
    assert ends["no_upkeep"]["videos"]["fragments"] == commits["videos"]
    for name in ("defaults", "frequent"):
        assert max(_fragments(runs[name], "search")) < plain[-1]
    assert ends["frequent"]["videos"]["fragments"] < commits["videos"]

    # Every commit is a version, kept while younger than the retention; once it has passed,
    # cleanup leaves the latest alone, and the bytes of the others go with them.
    for table in TABLES:
        assert ends["no_upkeep"][table]["versions"] > commits[table]
        assert headline["versions_defaults_after_retention"][table] == 1
        assert headline["bytes_defaults_after_retention"][table] < ends["defaults"][table]["bytes"]

    # The full-text index is refreshed where its upkeep runs, and only there.
    assert runs["defaults"]["index_upkeep_s"] > runs["no_upkeep"]["index_upkeep_s"]
    unindexed = {name: end["search"]["unindexed_rows"]["terms_idx"] for name, end in ends.items()}
    assert unindexed["no_upkeep"] == ends["no_upkeep"]["search"]["rows"]
    assert unindexed["defaults"] < unindexed["no_upkeep"]


def _fragments(run: dict[str, Any], table: str) -> list[int]:
    return [snapshot["tables"][table]["fragments"] for snapshot in run["timeline"]]
