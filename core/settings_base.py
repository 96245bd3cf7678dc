"""What every subsystem's settings model shares: frozen, unknown keys refused, and the
environment prefix ``REELSENSE_<SUBSYSTEM>_``."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict


def settings_config(prefix: str) -> SettingsConfigDict:
    """The ``model_config`` of one subsystem's settings, read from ``REELSENSE_{prefix}*``."""
    return SettingsConfigDict(env_prefix=f"REELSENSE_{prefix}", frozen=True, extra="forbid")
