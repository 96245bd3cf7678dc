"""``python -m bench.summary --quick``: the quality corpus's two short edits through the real
stages with the summary on (llama.cpp, the packaged SmolLM2): every answer valid in the schema
the stage asked for. No runtime is asserted: the numbers belong in reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.summary import main
from devkit.speech_videos import espeak_path


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng is not installed")
def test_quick_run_answers_every_video_in_its_schema(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    assert main(["--quick", "--workdir", str(tmp_path / "work"), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["videos"] == 2
    assert report["schema_valid"] == 2, report["answers"]
    for answer in report["answers"]:
        assert answer["answer"]["summary"]
        assert 1 <= len(answer["answer"]["tags"]) <= 5
