"""The OCR, text embedding, VLM and image embedding settings as sections of ``stages``
(``core.frame_stage_settings``): read from keyword arguments, a file and the environment; the
old flat names still read for one release, with a warning (``core.settings_renames``); and the
pipeline version as it was before they moved."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from cli.main import main as cli_main
from core import settings_renames
from core.config import ServiceConfig, StageSettings
from core.settings_renames import RENAMED_STAGE_KEYS, new_key
from stages.pipeline import Pipeline

# The default pipeline's version before the sections: moving settings must not recompute a video.
DEFAULT_VERSION = "v577da4352928"

# A value for every old name, unlike its default, as a YAML file or keyword argument gives it.
OLD_VALUES: dict[str, Any] = {
    "ocr_det_limit_side": 960,
    "ocr_min_score": 0.7,
    "ocr_threads": 2,
    "embed_model": "multilingual-e5-small",
    "embed_threads": 2,
    "vlm_model": "/models/qwen2-vl",
    "vlm_engine": "vllm",
    "vlm_output": "caption",
    "vlm_scope": "samples",
    "vlm_prompt": "What is this?",
    "vlm_description_prompt": "JSON please.",
    "vlm_max_new_tokens": 40,
    "vlm_description_max_tokens": 256,
    "vlm_max_pixels": 200_704,
    "vlm_batch_size": 4,
    "vlm_threads": 3,
    "image_embed_model": "/models/clip",
    "image_embed_batch_size": 8,
    "image_embed_threads": 4,
}


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the warnings of its own old names (they are given once per process)."""
    monkeypatch.setattr(settings_renames, "_warned", set())


@pytest.fixture
def service_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's own defaults, without the smaller Whisper the tests run."""
    monkeypatch.delenv("REELSENSE_ASR_MODEL", raising=False)


def section_value(stages: StageSettings, old: str) -> Any:
    section, key = RENAMED_STAGE_KEYS[old]
    return getattr(getattr(stages, section), key)


def nested(flat: dict[str, Any]) -> dict[str, dict[str, Any]]:
    sections: dict[str, dict[str, Any]] = {}
    for old, value in flat.items():
        section, key = RENAMED_STAGE_KEYS[old]
        sections.setdefault(section, {})[key] = value
    return sections


def write(tmp_path: Path, sections: dict[str, Any], name: str = "service.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(sections) if name.endswith(".yaml") else json.dumps(sections))
    return path


def test_every_old_name_has_a_field_in_its_section() -> None:
    assert set(OLD_VALUES) == set(RENAMED_STAGE_KEYS)
    for old in RENAMED_STAGE_KEYS:
        section, key = RENAMED_STAGE_KEYS[old]
        assert key in type(getattr(StageSettings(), section)).model_fields
        assert old not in StageSettings.model_fields


def test_the_sections_keep_their_defaults() -> None:
    stages = StageSettings()
    assert (stages.ocr.det_limit_side, stages.ocr.min_score, stages.ocr.threads) == (640, 0.5, 1)
    assert (stages.embed.model, stages.embed.threads) == ("use-multilingual-v3", 1)
    assert stages.vlm.model is None
    assert (stages.vlm.engine, stages.vlm.output, stages.vlm.scope) == (
        "transformers",
        "description",
        "shots",
    )
    assert (stages.vlm.description_max_tokens, stages.vlm.batch_size) == (512, 8)
    assert stages.image_embed.model is None
    assert (stages.image_embed.batch_size, stages.image_embed.threads) == (16, 1)


def test_the_new_keys_work_from_keyword_arguments() -> None:
    config = ServiceConfig.load(stages=nested(OLD_VALUES))
    for old, value in OLD_VALUES.items():
        assert section_value(config.stages, old) == value, old


@pytest.mark.parametrize("name", ["service.yaml", "service.json"])
def test_the_new_keys_work_from_a_file(tmp_path: Path, name: str) -> None:
    # YAML is a superset of JSON: a JSON file loads as well.
    path = write(tmp_path, {"stages": nested(OLD_VALUES)}, name)
    config, sources = ServiceConfig.load_sourced(path)
    for old, value in OLD_VALUES.items():
        assert section_value(config.stages, old) == value, old
        assert sources[new_key(old)] == "file"


def test_the_new_keys_work_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for section, values in nested(OLD_VALUES).items():
        monkeypatch.setenv(f"REELSENSE_STAGES_{section.upper()}", json.dumps(values))
    config, sources = ServiceConfig.load_sourced()
    for old, value in OLD_VALUES.items():
        assert section_value(config.stages, old) == value, old
        assert sources[new_key(old)] == "environment"


def test_a_section_in_the_environment_keeps_the_defaults_of_what_it_leaves_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REELSENSE_STAGES_OCR", '{"min_score": 0.7}')
    config, sources = ServiceConfig.load_sourced()
    assert config.stages.ocr.min_score == 0.7
    assert config.stages.ocr.det_limit_side == 640
    assert sources["stages.ocr.min_score"] == "environment"
    assert sources["stages.ocr.det_limit_side"] == "default"


def test_every_old_name_still_works_from_keyword_arguments_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="core.settings_renames"):
        stages = StageSettings(**OLD_VALUES)
    for old, value in OLD_VALUES.items():
        assert section_value(stages, old) == value, old
        assert f"stages.{old} is deprecated: use {new_key(old)}" in caplog.messages
    assert len(caplog.messages) == len(OLD_VALUES)


def test_every_old_name_still_works_from_a_file_and_says_where_it_came_from(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, {"stages": OLD_VALUES})
    with caplog.at_level(logging.WARNING, logger="core.settings_renames"):
        config, sources = ServiceConfig.load_sourced(path)
    for old, value in OLD_VALUES.items():
        assert section_value(config.stages, old) == value, old
        assert sources[new_key(old)] == "file", old
        assert f"stages.{old} is deprecated: use {new_key(old)}" in caplog.messages


def test_every_old_name_still_works_from_the_environment_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for old, value in OLD_VALUES.items():
        monkeypatch.setenv(f"REELSENSE_STAGES_{old.upper()}", str(value))
    with caplog.at_level(logging.WARNING, logger="core.settings_renames"):
        config, sources = ServiceConfig.load_sourced()
    for old, value in OLD_VALUES.items():
        assert section_value(config.stages, old) == value, old
        assert sources[new_key(old)] == "environment", old
        variable = f"REELSENSE_STAGES_{old.upper()}"
        assert f"{variable} (stages.{old}) is deprecated: use {new_key(old)}" in caplog.messages


def test_an_old_name_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="core.settings_renames"):
        for _ in range(3):
            StageSettings(ocr_min_score=0.7)
            ServiceConfig.model_validate({"stages": {"ocr_min_score": 0.7}})
    assert caplog.messages == ["stages.ocr_min_score is deprecated: use stages.ocr.min_score"]


def test_old_and_new_names_of_one_section_are_merged() -> None:
    stages = StageSettings(ocr={"det_limit_side": 960}, ocr_min_score=0.7)  # type: ignore[arg-type]
    assert (stages.ocr.det_limit_side, stages.ocr.min_score) == (960, 0.7)


def test_an_old_name_is_read_where_a_model_is_validated_from_a_mapping() -> None:
    # As a Ray replica rebuilds its configuration, without the settings sources.
    config = ServiceConfig.model_validate({"stages": {"vlm_model": "/models/qwen2-vl"}})
    assert config.stages.vlm.model == "/models/qwen2-vl"
    assert ServiceConfig.model_validate_json(config.to_replica_json()) == config


@pytest.mark.parametrize("old", sorted(RENAMED_STAGE_KEYS))
def test_a_value_given_both_ways_is_an_error_naming_both(old: str) -> None:
    value = OLD_VALUES[old]
    section, key = RENAMED_STAGE_KEYS[old]
    with pytest.raises(ValueError, match="are both given") as raised:
        StageSettings(**{old: value, section: {key: value}})
    assert f"stages.{old}" in str(raised.value)
    assert new_key(old) in str(raised.value)


def test_both_ways_in_a_file_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, {"stages": {"ocr_min_score": 0.7, "ocr": {"min_score": 0.6}}})
    with pytest.raises(ValueError, match=r"stages\.ocr_min_score and stages\.ocr\.min_score"):
        ServiceConfig.load(path)


def test_both_ways_in_a_mapping_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match=r"stages\.vlm_model and stages\.vlm\.model"):
        ServiceConfig.model_validate({"stages": {"vlm_model": "a", "vlm": {"model": "b"}}})


def test_both_ways_in_the_environment_is_an_error_naming_both_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REELSENSE_STAGES_OCR_MIN_SCORE", "0.7")
    monkeypatch.setenv("REELSENSE_STAGES_OCR", '{"min_score": 0.6}')
    with pytest.raises(ValueError, match="are both given") as raised:
        ServiceConfig.load()
    assert "REELSENSE_STAGES_OCR_MIN_SCORE" in str(raised.value)
    assert "min_score in REELSENSE_STAGES_OCR" in str(raised.value)


def test_an_old_name_in_one_source_keeps_its_precedence_over_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file wins over the environment, whichever names each uses.
    monkeypatch.setenv("REELSENSE_STAGES_OCR_MIN_SCORE", "0.9")
    monkeypatch.setenv("REELSENSE_STAGES_EMBED", '{"threads": 4}')
    path = write(tmp_path, {"stages": {"ocr": {"min_score": 0.6}, "embed_threads": 2}})
    config, sources = ServiceConfig.load_sourced(path)
    assert (config.stages.ocr.min_score, sources["stages.ocr.min_score"]) == (0.6, "file")
    assert (config.stages.embed.threads, sources["stages.embed.threads"]) == (2, "file")


def test_unknown_keys_inside_a_section_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for section in ("ocr", "embed", "vlm", "image_embed"):
        with pytest.raises(ValidationError, match=f"{section}.no_such_key"):
            StageSettings(**{section: {"no_such_key": 1}})
    with pytest.raises(ValidationError, match="no_such_key"):
        ServiceConfig.load(write(tmp_path, {"stages": {"vlm": {"no_such_key": 1}}}))
    monkeypatch.setenv("REELSENSE_STAGES_OCR", '{"min_scor": 0.7}')
    with pytest.raises(ValidationError, match="min_scor"):
        ServiceConfig.load()


def test_config_show_names_the_new_keys_and_their_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REELSENSE_STAGES_VLM_THREADS", "2")
    path = write(tmp_path, {"stages": {"ocr_min_score": 0.7, "embed": {"threads": 3}}})
    assert cli_main(["config", "show", "--config", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["stages.ocr.min_score"] == {"value": 0.7, "source": "file"}
    assert shown["stages.embed.threads"] == {"value": 3, "source": "file"}
    assert shown["stages.vlm.threads"] == {"value": 2, "source": "environment"}
    assert shown["stages.ocr.det_limit_side"] == {"value": 640, "source": "default"}
    assert not any(name in path for name in RENAMED_STAGE_KEYS for path in shown)


@pytest.mark.usefixtures("service_defaults")
def test_the_default_pipeline_version_is_unchanged() -> None:
    assert Pipeline.from_config(ServiceConfig.load()).version == DEFAULT_VERSION


# Stage settings by their old names, and the pipeline version they gave before the sections
# (the image model a folder ``clipfake`` holding ``CLIP_CONFIG``: its id is its content's).
CLIP_CONFIG = '{"model_type":"clip"}\n'
VERSIONS_BEFORE = [
    (
        {
            "vlm_model": "/models/qwen2-vl",
            "image_embed_model": "clipfake",
            "vlm_max_pixels": 200704,
            "vlm_output": "caption",
        },
        "v1759efe278ae",
    ),
    (
        {
            "ocr_min_score": 0.7,
            "ocr_det_limit_side": 960,
            "ocr_threads": 2,
            "embed_model": "multilingual-e5-small",
            "embed_threads": 2,
            "vlm_model": "x",
            "vlm_engine": "vllm",
            "vlm_scope": "samples",
            "vlm_batch_size": 4,
            "vlm_threads": 2,
            "vlm_max_new_tokens": 40,
            "vlm_description_max_tokens": 256,
            "vlm_prompt": "p",
            "vlm_description_prompt": "d",
            "image_embed_model": "clipfake",
            "image_embed_batch_size": 8,
            "image_embed_threads": 3,
        },
        "vd554089370b7",
    ),
]


@pytest.mark.usefixtures("service_defaults")
@pytest.mark.parametrize(("flat", "version"), VERSIONS_BEFORE)
def test_a_configured_pipeline_keeps_its_version_by_either_name(
    tmp_path: Path, flat: dict[str, Any], version: str
) -> None:
    clip = tmp_path / "clipfake"
    clip.mkdir()
    (clip / "config.json").write_text(CLIP_CONFIG)
    flat = {**flat, "image_embed_model": str(clip)}
    by_old_names = Pipeline.from_config(ServiceConfig.load(stages=flat))
    by_new_names = Pipeline.from_config(ServiceConfig.load(stages=nested(flat)))
    assert by_old_names.lineage.versions == by_new_names.lineage.versions
    assert by_old_names.version == by_new_names.version == version
