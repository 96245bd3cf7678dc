"""``bench.perf.faces_cost`` on one frame: the figures are there for both input sizes and
nothing is taken for a face. No speed is asserted: the numbers belong in reports."""

from __future__ import annotations

from bench.perf.faces_cost import faces_cost


def test_the_figures_of_one_frame() -> None:
    report = faces_cost(frames=1, runs=1)
    for name in ("noise_640", "noise_320", "photos_640", "photos_320"):
        figures = report[name]
        assert isinstance(figures, dict)
        assert figures["cpu_ms_per_frame"] > 0
        assert figures["faces_found"] == 0  # no face turned to the camera in any of them
