"""The settings a local Ray gets from the service, and that the environment still wins."""

from __future__ import annotations

import os

import pytest

from runtime.cluster import _LOCAL_RAY_ENV, lighten_local_ray


def test_a_local_ray_is_lightened_unless_the_environment_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in _LOCAL_RAY_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_SERVE_CONTROL_LOOP_INTERVAL_S", "0.1")
    lighten_local_ray()
    assert os.environ["RAY_SERVE_CONTROL_LOOP_INTERVAL_S"] == "0.1"  # set by the operator
    assert os.environ.get("RAY_enable_task_events") == "false"  # noqa: SIM112 (Ray spells it so)
    assert os.environ["RAY_LOG_MONITOR_MANY_FILES_THRESHOLD"] == "0"
    assert os.environ["LOG_NAME_UPDATE_INTERVAL_S"] == "5"
