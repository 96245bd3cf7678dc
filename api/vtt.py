"""WebVTT (W3C WebVTT: The Web Video Text Tracks Format) from timed text."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The shortest cue: players drop cues whose end is not after their start.
_MIN_CUE_S = 0.001


@dataclass(frozen=True)
class Cue:
    start_s: float
    end_s: float
    text: str


def webvtt(cues: Iterable[Cue]) -> str:
    """A WebVTT file: the header, then one numbered cue per text in order of start time.
    Text is escaped (``&``, ``<``, ``>``) and a cue's lines never hold a blank line or an
    arrow, which would end or restart the cue."""
    blocks = ["WEBVTT"]
    ordered = sorted(cues, key=lambda cue: (cue.start_s, cue.end_s))
    for number, cue in enumerate(ordered, start=1):
        end = max(cue.end_s, cue.start_s + _MIN_CUE_S)
        blocks.append(f"{number}\n{_time(cue.start_s)} --> {_time(end)}\n{_escape(cue.text)}")
    return "\n\n".join(blocks) + "\n"


def _time(seconds: float) -> str:
    millis = round(max(0.0, seconds) * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{millis:03d}"


def _escape(text: str) -> str:
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    lines = (line.strip() for line in escaped.replace("\r", "\n").split("\n"))
    return "\n".join(line for line in lines if line) or " "
