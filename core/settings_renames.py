"""Names of settings that moved, still read for one release.

The settings of the OCR, text embedding, VLM and image embedding stages were flat fields of
``stages`` (``stages.ocr_min_score``) and are now sections of their own (``stages.ocr.min_score``,
``core.frame_stage_settings``). An old name, from the YAML file, keyword arguments or the
environment (``REELSENSE_STAGES_OCR_MIN_SCORE``), is moved to its new place with a warning,
once per name and process; a value given under both names by one source is refused.

Each source is moved on its own, before pydantic-settings merges them, so that the usual
precedence holds between an old name in one source and the new one in another: a file's
``stages.ocr.min_score`` wins over ``REELSENSE_STAGES_OCR_MIN_SCORE`` as it wins over
``REELSENSE_STAGES_OCR``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import EnvSettingsSource, PydanticBaseSettingsSource

log = logging.getLogger(__name__)

#: Old flat name in ``stages`` -> (its section, its name there). Removed in the next release.
RENAMED_STAGE_KEYS: dict[str, tuple[str, str]] = {
    "ocr_det_limit_side": ("ocr", "det_limit_side"),
    "ocr_min_score": ("ocr", "min_score"),
    "ocr_threads": ("ocr", "threads"),
    "embed_model": ("embed", "model"),
    "embed_threads": ("embed", "threads"),
    "vlm_model": ("vlm", "model"),
    "vlm_engine": ("vlm", "engine"),
    "vlm_output": ("vlm", "output"),
    "vlm_scope": ("vlm", "scope"),
    "vlm_prompt": ("vlm", "prompt"),
    "vlm_description_prompt": ("vlm", "description_prompt"),
    "vlm_max_new_tokens": ("vlm", "max_new_tokens"),
    "vlm_description_max_tokens": ("vlm", "description_max_tokens"),
    "vlm_max_pixels": ("vlm", "max_pixels"),
    "vlm_batch_size": ("vlm", "batch_size"),
    "vlm_threads": ("vlm", "threads"),
    "image_embed_model": ("image_embed", "model"),
    "image_embed_batch_size": ("image_embed", "batch_size"),
    "image_embed_threads": ("image_embed", "threads"),
}

STAGES = "stages"
_warned: set[str] = set()  # the old names already warned about in this process


def new_key(old: str) -> str:
    """The new path of the old ``stages`` key ``old``: ``stages.ocr.min_score``."""
    section, key = RENAMED_STAGE_KEYS[old]
    return f"{STAGES}.{section}.{key}"


def _warn_once(old: str, given_as: str) -> None:
    if old in _warned:
        return
    _warned.add(old)
    log.warning("%s is deprecated: use %s", given_as, new_key(old))


def _given(section: object, key: str) -> bool:
    if isinstance(section, Mapping):
        return key in section
    return isinstance(section, BaseModel) and key in section.model_fields_set


def move_renamed(values: Mapping[str, Any], *, env_prefix: str | None = None) -> dict[str, Any]:
    """``values`` of ``stages`` from one source, with each old name moved into its section.

    ``env_prefix``: the values came from the environment, and the warning names the variable.
    A key given under both names is a ``ValueError`` naming both.
    """
    moved = dict(values)
    for old in [key for key in values if key in RENAMED_STAGE_KEYS]:
        section_name, key = RENAMED_STAGE_KEYS[old]
        value = moved.pop(old)
        section = moved.get(section_name, {})
        given_as, new = f"{STAGES}.{old}", new_key(old)
        if env_prefix is not None:
            given_as = f"{env_prefix}{old}".upper() + f" ({given_as})"
            new = f"{key} in {env_prefix.upper()}{section_name.upper()} ({new})"
        if _given(section, key):
            raise ValueError(f"{given_as} and {new} are both given: keep only {new}")
        if isinstance(section, BaseModel):
            section = section.model_dump(exclude_unset=True)
        if not isinstance(section, Mapping):
            raise ValueError(f"{new_key(old)}: {STAGES}.{section_name} is not a section")
        moved[section_name] = {**section, key: value}
        _warn_once(old, given_as)
    return moved


def current_names(section: str, values: Any) -> Any:
    """One source's values of the configuration section ``section`` with the old names in
    their new places (``stages``; the other sections have none)."""
    if section == STAGES and isinstance(values, Mapping):
        return move_renamed(values)
    return values


class RenamedKeysSource(PydanticBaseSettingsSource):
    """A settings source of ``stages`` whose old names are moved into their sections before
    its values meet the other sources' (``move_renamed``). Over the environment, it also reads
    the old variables, which no field of ``stages`` names any more."""

    def __init__(self, source: PydanticBaseSettingsSource) -> None:
        super().__init__(source.settings_cls)
        self._source = source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, "", False  # __call__ asks the wrapped source

    def __call__(self) -> dict[str, Any]:
        values = self._source()
        env = self._source
        if not isinstance(env, EnvSettingsSource):
            return move_renamed(values)
        old: dict[str, Any] = {}
        for name in RENAMED_STAGE_KEYS:
            variable = f"{env.env_prefix}{name}"
            value = env.env_vars.get(variable if env.case_sensitive else variable.lower())
            if value is not None:
                old[name] = value
        return move_renamed({**values, **old}, env_prefix=env.env_prefix)
