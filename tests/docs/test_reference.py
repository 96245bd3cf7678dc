"""The documentation's generated reference pages match the code they come from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docs_reference.py"


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_committed_reference_pages_are_what_the_code_generates(reference: ModuleType) -> None:
    for path, text in reference.pages().items():
        shown = path.relative_to(reference.ROOT)
        assert path.exists(), f"{shown} is missing: run `{reference.COMMAND}`"
        assert path.read_text(encoding="utf-8") == text, (
            f"{shown} differs from what the code generates: run `{reference.COMMAND}`"
        )


def test_every_setting_is_described(reference: ModuleType) -> None:
    try:
        reference.configuration_page()
    except KeyError as exc:
        pytest.fail(
            f"setting {exc.args[0]} has no description: give it a comment in the settings "
            "source, or an entry in UNCOMMENTED of scripts/configuration_text.py"
        )


def test_no_description_is_kept_beside_one_the_source_gives(reference: ModuleType) -> None:
    assert reference.uncommented_unused() == [], (
        "these entries of UNCOMMENTED in scripts/configuration_text.py name no setting, or one "
        "the source now describes: remove them"
    )


def test_secrets_show_no_default(reference: ModuleType) -> None:
    page = reference.configuration_page()
    for variable in (
        "REELSENSE_REDIS_PASSWORD",
        "REELSENSE_STORAGE_S3_SECRET_ACCESS_KEY",
        "REELSENSE_NOTIFY_WEBHOOK_SECRETS",
        "REELSENSE_API_TENANT_TOKENS",
    ):
        (row,) = [line for line in page.splitlines() if f"`{variable}`" in line]
        assert "| (secret) |" in row


def test_the_api_schema_is_the_one_the_app_serves(reference: ModuleType) -> None:
    schema = reference.openapi_schema()
    assert schema["info"]["title"] == "reelsense progress API"
    assert "/v1/videos/{video_id}" in schema["paths"]
    assert reference.openapi_schema() == schema  # nothing in it varies between builds
