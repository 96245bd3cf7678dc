"""No import circle between the top-level packages.

``lint-imports`` checks the layers and the circles inside each package (``[tool.importlinter]``
in pyproject.toml); packages of one layer may import each other, and an import-linter contract
only looks for circles among the children of one parent, which the top-level packages lack.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_no_import_circle_between_packages() -> None:
    settings = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    packages = [name for name in settings["root_packages"] if name != "tests"]
    graph = grimp.build_graph(*packages, cache_dir=None)
    breakers = graph.nominate_cycle_breakers(*packages)
    assert not breakers, f"packages import each other in a circle; remove one of {sorted(breakers)}"
