"""Where each setting of a configuration came from, and its value as it may be shown.

A setting is named by its path: ``kafka.max_in_flight``, and ``ray.ocr.num_cpus`` for a field
of a nested model (a stage's pool). Its source is the first that gave it:

- ``override``: the keyword overrides of ``ServiceConfig.load``;
- ``file``: the YAML file;
- ``environment``: a ``REELSENSE_*`` variable, read by pydantic-settings;
- ``default``: none of them.

A placement profile reports what it filled as ``profile:<name>`` (``runtime.placement``): its
values are not the user's, though pydantic then counts them as given (``model_copy`` adds an
update to ``model_fields_set``), so they are told apart here and not from the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, SecretStr

DEFAULT = "default"
ENVIRONMENT = "environment"
FILE = "file"
OVERRIDE = "override"
MASK = "**********"  # what a secret shows, whatever its length

# One source and the values it gave, nested as the configuration is
# (``{"ray": {"ocr": {"num_cpus": 2}}}``).
Layer = tuple[str, Mapping[str, Any]]


def profile_source(profile: str) -> str:
    """The source of a setting that the placement profile ``profile`` filled."""
    return f"profile:{profile}"


def settings_of(model: BaseModel) -> Iterator[tuple[str, Any]]:
    """Every setting of ``model`` as (path, value), in declaration order; a field that holds a
    model is walked into, a collection (a tuple of subscriptions, a mapping) is one setting."""
    for path, value, _ in _settings(model, (), True):
        yield ".".join(path), value


def sources_of(model: BaseModel, layers: Sequence[Layer]) -> dict[str, str]:
    """path -> source for every setting of ``model``: the first of ``layers`` that holds the
    path, else ``environment`` where pydantic counts the field as given though no layer gave
    it (a settings model reads nothing else: no dotenv, no secrets folder), else ``default``."""
    found: dict[str, str] = {}
    for path, _, given in _settings(model, (), True):
        source = next((source for source, values in layers if _holds(values, path)), None)
        found[".".join(path)] = source or (ENVIRONMENT if given else DEFAULT)
    return found


def _settings(
    model: BaseModel, path: tuple[str, ...], given: bool
) -> Iterator[tuple[tuple[str, ...], Any, bool]]:
    """The one walk of both: each setting's path, value, and whether pydantic counts it as
    given (a nested model's field only down a line of fields each given in its parent)."""
    for name in type(model).model_fields:
        here = (*path, name)
        value = getattr(model, name)
        given_here = given and name in model.model_fields_set
        if isinstance(value, BaseModel):
            yield from _settings(value, here, given_here)
        else:
            yield here, value, given_here


def _holds(values: object, path: tuple[str, ...]) -> bool:
    node = values
    for part in path:
        if isinstance(node, Mapping):
            if part not in node:
                return False
            node = node[part]
        elif isinstance(node, BaseModel):  # an override may pass a model (a PoolSettings)
            if part not in node.model_fields_set:
                return False
            node = getattr(node, part)
        else:
            return False
    return True


def public(value: object) -> object:
    """``value`` as JSON types, every ``SecretStr`` in it replaced by ``MASK``."""
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, BaseModel):
        return {name: public(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, Mapping):
        return {str(key): public(item) for key, item in value.items()}
    if isinstance(value, (tuple, list, set, frozenset)):
        return [public(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
