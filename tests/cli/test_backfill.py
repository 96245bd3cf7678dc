"""``reelsense backfill --via-service``: videos from a manifest, a folder or the videos table go
to the bulk topic of the real (Tansu) broker, each id once; what cannot go is skipped with its
reason, and the run goes on."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from backfill import sources
from backfill.sources import BackfillItem, Selection, Skipped
from cli.main import main as cli_main
from consumers.admin import ensure_topics
from consumers.events import parse_event
from core.config import StorageSettings
from devkit.services import free_port
from devkit.workload import read_records
from sinks.lance import LanceSummarySink
from tests.sinks import make_result


def config_file(tmp_path: Path, bootstrap: str, bulk_topic: str) -> Path:
    path = tmp_path / "service.yaml"
    storage = {"lance_uri": str(tmp_path / "lance"), "object_store_uri": str(tmp_path / "o")}
    kafka = {"bootstrap": bootstrap, "bulk_topic": bulk_topic}
    path.write_text(yaml.safe_dump({"kafka": kafka, "storage": storage}))
    return path


async def test_a_manifest_goes_to_the_bulk_topic_each_id_once(
    tmp_path: Path, kafka_bootstrap: str, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"bulk-{unique}"
    await ensure_topics(kafka_bootstrap, {topic: 2})
    manifest = tmp_path / "catalogue.jsonl"
    lines = [
        {"id": "old-1", "uri": "s3://archive/old-1.mp4", "tenant": "archive"},
        "not json at all",
        {"video_id": "old-2", "uri": "https://cdn.example/old-2.mp4", "metadata": {"year": 2019}},
        {"id": "old-3", "uri": "gopher://old-3"},
        {"id": "old-1", "uri": "s3://archive/again.mp4"},
        [1, 2],
    ]
    manifest.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    )
    argv = [
        "backfill",
        "--via-service",
        "--manifest",
        str(manifest),
        "--config",
        str(config_file(tmp_path, kafka_bootstrap, topic)),
        "--json",
    ]
    assert await asyncio.to_thread(cli_main, argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["selected"], report["sent"], report["topic"]) == (2, 2, topic)
    reasons = {entry["where"]: entry["reason"] for entry in report["skipped_entries"]}
    assert set(reasons) == {f"catalogue.jsonl:{n}" for n in (2, 4, 5, 6)}
    assert "not JSON" in reasons["catalogue.jsonl:2"]
    assert "uri" in reasons["catalogue.jsonl:4"]
    assert "already sent from catalogue.jsonl:1" in reasons["catalogue.jsonl:5"]

    records = await read_records(kafka_bootstrap, topic, 2)
    events = {r.key: parse_event(r.key, r.value, max_bytes=65536) for r in records}
    assert set(events) == {b"old-1", b"old-2"}
    assert events[b"old-1"].tenant == "archive"
    assert events[b"old-1"].uri == "s3://archive/old-1.mp4"  # the first entry of the id
    assert events[b"old-2"].metadata == {"year": 2019}


def test_a_backfill_says_how_it_runs_and_where_it_sends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("")
    assert cli_main(["backfill", "--manifest", str(manifest), "--json"]) == 0  # nothing to do
    assert json.loads(capsys.readouterr().out)["selected"] == 0
    no_lane = tmp_path / "no-lane.yaml"
    no_lane.write_text(yaml.safe_dump({"kafka": {"bulk_topic": None}}))
    argv = ["backfill", "--via-service", "--manifest", str(manifest), "--config", str(no_lane)]
    assert cli_main(argv) == 2


def test_a_parquet_manifest_and_a_folder(tmp_path: Path) -> None:
    table = pa.table(
        {
            "id": ["p-1", "p 2"],
            "uri": ["file:///v/p-1.mp4", "file:///v/p-2.mp4"],
            "tenant": ["t1", None],
            "metadata": ['{"a": 1}', None],
        }
    )
    pq.write_table(table, tmp_path / "m.parquet")
    found = list(sources.from_manifest(tmp_path / "m.parquet"))
    assert isinstance(found[0], BackfillItem)
    assert (found[0].event.tenant, found[0].event.metadata) == ("t1", {"a": 1})
    assert isinstance(found[1], Skipped)  # "p 2" is not an id
    assert "video_id" in found[1].reason

    folder = tmp_path / "catalogue"
    (folder / "2019" / "june").mkdir(parents=True)
    for name in ("a.mp4", "2019/june/b.MOV", "notes.txt", "2019/cover.jpg"):
        (folder / name).write_bytes(b"x")
    items = list(sources.from_prefix(str(folder), StorageSettings(), tenant="archive"))
    assert all(isinstance(i, BackfillItem) for i in items)
    events = {i.event.video_id: i.event for i in items if isinstance(i, BackfillItem)}
    assert set(events) == {"a", "2019_june_b"}
    assert events["a"].uri == (folder / "a.mp4").resolve().as_uri()
    assert {e.tenant for e in events.values()} == {"archive"}
    missing = sources.from_prefix(str(tmp_path / "missing"), StorageSettings())
    assert [type(i) for i in missing] == [Skipped]


def test_the_videos_table_by_version_tenant_and_time(tmp_path: Path) -> None:
    storage = StorageSettings(lance_uri=str(tmp_path / "lance"))
    sink = LanceSummarySink.from_settings(storage)
    sink.open()
    results = [
        make_result("old-a", frames=2, version="v1", embed=False),
        make_result("old-b", frames=2, version="v1", tenant="other", embed=False),
        make_result("new-c", frames=2, version="v2", embed=False),
    ]
    results[2] = replace(results[2], completed_at=results[2].completed_at.replace(year=2026))
    sink.write(results)

    def ids(selection: Selection) -> list[str]:
        entries = list(sources.from_videos_table(storage, selection))
        return [e.event.video_id for e in entries if isinstance(e, BackfillItem)]

    assert ids(Selection()) == ["new-c", "old-a", "old-b"]
    assert ids(Selection(not_version="v2")) == ["old-a", "old-b"]
    assert ids(Selection(tenant="other")) == ["old-b"]
    assert ids(Selection(since=datetime(2026, 1, 1, tzinfo=UTC))) == ["new-c"]
    assert ids(Selection(until=datetime(2026, 1, 1, tzinfo=UTC))) == ["old-a", "old-b"]
    first = next(iter(sources.from_videos_table(storage, Selection(tenant="other"))))
    assert isinstance(first, BackfillItem)
    assert first.event.uri == "file:///videos/old-b.mp4"
    assert first.event.metadata == {"title": "old-b"}


def test_a_broker_down_is_an_error_and_nothing_is_counted_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "v1", "uri": "s3://b/v1.mp4"}) + "\n")
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    config = config_file(tmp_path, down, "bulk")
    argv = ["backfill", "--via-service", "--manifest", str(manifest), "--config", str(config)]
    assert cli_main(argv) == 1
    assert f"cannot publish to {down}" in capsys.readouterr().err
