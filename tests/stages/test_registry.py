"""The stage registry: the service's own stages and those of installed packages (entry points
``reelsense.stages``), each checked when found; the pipeline built from configuration; each
stage's version from what it reads."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import ServiceConfig
from stages.pipeline import Pipeline
from stages.registry import BUILT_IN, PluginError, installed

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"

# Stages a careless package could ship; each case installs one of them alone.
BAD_STAGES = """
from core.outputs import VideoOutput
from core.records import Chunk
from stages.base import PIXELS, Fusion, Resources, Stage, VideoStage


class Frames(Stage[Chunk, Chunk]):
    name = "frames_ok"
    reads = (PIXELS,)
    fills = ("found",)

    def process_batch(self, items):
        return list(items)


class NotAStage:
    name = "not_a_stage"


class BadName(Frames):
    name = "Bad Name"


class TakenName(Frames):
    name = "ocr"


class ReadsText(Frames):
    name = "reads_text"
    reads = ("ocr_lines",)


class FillsAField(Frames):
    name = "fills_a_field"
    fills = ("caption",)


class FillsNothing(Frames):
    name = "fills_nothing"
    fills = ()


class GpuFused(Frames):
    name = "gpu_fused"
    resources = Resources(gpus=1.0)
    fusion = Fusion.IF_SET


class Audio(Frames):
    name = "audio_stage"
    kind = Stage.kind.__class__.AUDIO


class TakesShots(VideoStage):
    name = "takes_shots"
    segment_kinds = ("shot",)

    def analyse(self, result):
        return VideoOutput()


class HidesKind(VideoStage):
    name = "hides_kind"
    segment_kinds = ("chapter",)
    searchable = ("summary",)

    def analyse(self, result):
        return VideoOutput()


class Chapters(VideoStage):
    name = "z_chapters"
    reads = ("ocr_lines",)

    def analyse(self, result):
        return VideoOutput()


class Titles(VideoStage):
    name = "a_titles"
    reads = ("z_chapters",)

    def analyse(self, result):
        return VideoOutput()


class ReadsPixels(VideoStage):
    name = "reads_pixels"
    reads = (PIXELS,)

    def analyse(self, result):
        return VideoOutput()
"""


def install(folder: Path, entries: dict[str, str]) -> None:
    """A package ``folder`` as pip leaves one (a distribution named after the folder): its
    module and entry points on ``sys.path``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bad_stages.py").write_text(BAD_STAGES)
    info = folder / f"{folder.name}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {folder.name}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[reelsense.stages]\n{lines}")
    sys.path.insert(0, str(folder))
    installed.cache_clear()


@pytest.fixture(autouse=True)
def clean_path() -> Iterator[None]:
    before = list(sys.path)
    installed.cache_clear()
    yield
    sys.path[:] = before
    sys.modules.pop("bad_stages", None)
    installed.cache_clear()


@pytest.fixture
def colour_stages() -> None:
    """The example package installed (``clean_path`` takes it away again)."""
    sys.path.insert(0, str(PLUGINS))
    installed.cache_clear()


def test_the_services_own_stages_come_first_in_pipeline_order() -> None:
    assert list(installed()) == [cls.name for cls in BUILT_IN]


def test_an_installed_package_adds_its_stages_and_configuration_turns_them_on(
    colour_stages: None,
) -> None:
    assert list(installed())[-2:] == ["colour", "colour_runs"]
    plain = Pipeline.from_config(ServiceConfig.load())
    assert "colour" not in [stage.name for stage in plain.stages]  # installed, not named
    both = Pipeline.from_config(
        ServiceConfig.load(stages={"plugins": {"colour": {}, "colour_runs": {"min_run_s": 1}}})
    )
    assert [stage.name for stage in both.image_stages] == [
        "ocr",
        "labels",
        "qr",
        "fingerprint",
        "colour",
    ]
    assert [stage.name for stage in both.video_stages] == [
        "shot_labels",
        "chapters",
        "review",
        "duplicates",
        "colour_runs",
    ]
    assert both.lineage.analysed_fields == ("ocr_lines", "labels", "qr", "fingerprint", "colour")
    # Their versions are their own: the service's stages keep theirs.
    old, new = plain.lineage.versions, both.lineage.versions
    assert {name: new[name] for name in old} == old
    assert set(new) - set(old) == {"colour", "colour_runs"}


def test_a_stage_reads_the_versions_of_the_stages_that_fill_what_it_reads(
    colour_stages: None,
) -> None:

    def versions(**stages: object) -> dict[str, str]:
        plugins = {"colour": stages.pop("colour", {}), "colour_runs": {}}
        config = ServiceConfig.load(stages={**stages, "plugins": plugins})
        return dict(Pipeline.from_config(config).lineage.versions)

    base = versions()
    palette = versions(colour={"palette": ["white", "blue"]})
    assert {k for k in base if base[k] != palette[k]} == {"colour", "colour_runs"}
    sampled = versions(sample_fps=2.0)  # new pixels: every stage that reads them, and on
    assert {k for k in base if base[k] != sampled[k]} == {
        "decode", "ocr", "labels", "qr", "fingerprint", "embed", "colour", "colour_runs",
        "shot_labels", "chapters", "review", "duplicates",
    }  # fmt: skip
    ocr = versions(ocr={"min_score": 0.7})  # the text: what embeds it and chapters it, not colours
    assert {k for k in base if base[k] != ocr[k]} == {"ocr", "embed", "chapters", "review"}


def test_a_name_no_installed_package_gives_stops_the_pipeline_at_start() -> None:
    config = ServiceConfig.load(stages={"plugins": {"no_such_stage": {}}})
    with pytest.raises(PluginError, match="no_such_stage: no installed package"):
        Pipeline.from_config(config)


def test_a_stage_turned_on_without_the_one_it_reads_stops_the_pipeline(colour_stages: None) -> None:
    config = ServiceConfig.load(stages={"plugins": {"colour_runs": {}}})
    with pytest.raises(PluginError, match="colour_runs reads colour, which no stage"):
        Pipeline.from_config(config)


def test_a_video_stage_runs_after_the_video_stages_it_reads(tmp_path: Path) -> None:
    install(
        tmp_path / "chapters",
        {"a_titles": "bad_stages:Titles", "z_chapters": "bad_stages:Chapters"},
    )
    config = ServiceConfig.load(stages={"plugins": {"a_titles": {}, "z_chapters": {}}})
    pipeline = Pipeline.from_config(config)
    assert [stage.name for stage in pipeline.video_stages][-2:] == ["z_chapters", "a_titles"]
    versions = pipeline.lineage.versions
    changed = ServiceConfig.load(
        stages={"sample_fps": 3.0, "plugins": {"a_titles": {}, "z_chapters": {}}}
    )
    again = Pipeline.from_config(changed).lineage.versions
    # Titles read the chapters, which read the text: new pixels reach both.
    assert again["z_chapters"] != versions["z_chapters"]
    assert again["a_titles"] != versions["a_titles"]


def test_a_plug_ins_settings_are_checked_by_its_own_model(colour_stages: None) -> None:
    config = ServiceConfig.load(stages={"plugins": {"colour_runs": {"min_run_s": -1}}})
    with pytest.raises(ValueError, match="min_run_s"):
        Pipeline.from_config(config)


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("bad_stages:NotAStage", "not a Stage subclass"),
        ("bad_stages:BadName", "is not 2-40 characters"),
        ("bad_stages:TakenName", "'ocr' is taken"),
        ("bad_stages:ReadsText", "reads ('image',), the pixels"),
        ("bad_stages:FillsAField", "'caption', which is not a new output name"),
        ("bad_stages:FillsNothing", "fills at least one output"),
        ("bad_stages:GpuFused", "GPUs runs in a pool of its own"),
        ("bad_stages:Audio", "of kind frames or video"),
        ("bad_stages:TakesShots", "segment kind 'shot' is not one of its own"),
        ("bad_stages:HidesKind", "searchable a kind it does not declare"),
        ("bad_stages:ReadsPixels", "reads results, not pixels"),
        ("bad_stages:Missing", "cannot be imported"),
        ("no_such_module:Stage", "cannot be imported"),
    ],
)
def test_a_broken_plug_in_is_refused_when_found_with_what_is_wrong(
    tmp_path: Path, target: str, reason: str
) -> None:
    install(tmp_path / "package", {"broken": target})
    with pytest.raises(PluginError, match=re.escape(reason)) as refused:
        installed()
    assert f"broken = {target}" in str(refused.value)


def test_two_packages_giving_one_name_are_refused(tmp_path: Path) -> None:
    install(tmp_path / "one", {"frames_ok": "bad_stages:Frames"})
    assert "frames_ok" in installed()
    install(tmp_path / "two", {"frames_again": "bad_stages:Frames"})
    with pytest.raises(PluginError, match="'frames_ok' is taken"):
        installed()


def test_a_plug_ins_pool_starts_from_its_declaration_and_its_ray_pools_entry(
    colour_stages: None,
) -> None:
    from runtime.placement import place
    from runtime.pools.application import deployment_options
    from runtime.pools.base import later_stages

    pooled = ServiceConfig.load(
        stages={"plugins": {"colour": {}}},
        ray={"placement": "pools", "pools": {"colour": {"num_cpus": 0.25, "max_replicas": 3}}},
        runtime={"executor": "ray"},
    )
    stage = later_stages(Pipeline.from_config(pooled))["colour"]
    options = deployment_options("colour", stage.resources, pooled.ray.pool("colour"))
    assert options["name"] == "colour"
    assert options["ray_actor_options"]["num_cpus"] == 0.25
    assert options["autoscaling_config"]["max_replicas"] == 3
    assert "colour" not in place(pooled).config.ray.fused

    # Laid out per core, it runs inside the decode replicas as it declares (Fusion.PER_CORE),
    # unless its pool says otherwise.
    per_core = ServiceConfig.load(
        stages={"plugins": {"colour": {}}},
        ray={"placement": "per_core", "num_cpus": 2},
        runtime={"executor": "ray"},
    )
    placed = place(per_core)
    assert "colour" in placed.config.ray.fused
    assert "ray.pools.colour.fuse" in placed.filled
    assert per_core.ray.pools == {}  # the user's configuration is left as it was
    kept = ServiceConfig.load(
        stages={"plugins": {"colour": {}}},
        ray={"placement": "per_core", "num_cpus": 2, "pools": {"colour": {"fuse": False}}},
        runtime={"executor": "ray"},
    )
    assert "colour" not in place(kept).config.ray.fused
