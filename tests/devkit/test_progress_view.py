"""The terminal's progress table (``reelsense status``, ``submit --follow`` and the demo): a
bar per stage, and a stage with nothing to do for the video shown as such, never as
``0/?``."""

from __future__ import annotations

import io

from rich.console import Console

from checkpoint.base import StageProgress, VideoState, VideoStatus
from devkit.progress_view import progress_table, stage_bar


def rendered(*statuses: VideoStatus) -> list[str]:
    console = Console(file=io.StringIO(), width=200, record=True, color_system=None)
    console.print(progress_table(statuses))
    return console.export_text().splitlines()


def test_a_bar_shows_the_share_done_once_the_total_is_known() -> None:
    assert stage_bar(StageProgress(done=3, total=4)) == "█████████░░░ 3/4"
    assert stage_bar(StageProgress(done=2)) == "2/?"


def test_a_stage_that_does_not_apply_is_shown_as_not_applicable_and_finished() -> None:
    shown = stage_bar(StageProgress(done=0, total=0, applicable=False))
    assert shown == "[dim]████████████ n/a[/dim]"  # a full bar: it counts as finished
    # Whatever it holds: before its end was known a stage may have counted nothing.
    assert stage_bar(StageProgress(done=0, total=None, applicable=False)) == shown


def test_the_table_shows_speech_of_a_video_without_audio_as_not_applicable() -> None:
    mute = VideoStatus(
        video_id="mute",
        status=VideoState.RUNNING,
        stages={
            "decode": StageProgress(done=2, total=4),
            "speech": StageProgress(done=0, total=0, applicable=False),
        },
    )
    talk = VideoStatus(
        video_id="talk",
        status=VideoState.RUNNING,
        stages={"decode": StageProgress(done=1), "speech": StageProgress(done=1)},
    )
    assert [line.split() for line in rendered(mute, talk)] == [
        ["video", "status", "decode", "speech"],
        ["mute", "running", "██████░░░░░░", "2/4", "████████████", "n/a"],
        ["talk", "running", "1/?", "1/?"],
    ]
