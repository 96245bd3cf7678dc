"""Terminal rendering of a video's result (the ``/v1/videos/{id}/result`` answer): its shots,
its transcript, its text on screen over time and each sample's lines."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text


def result_table(body: dict[str, Any]) -> Table:
    """The spans of a ``/v1/videos/{id}/result`` answer: when, what, how sure."""
    video = body["video"]
    table = Table(title=f"{video['video_id']} ({video['tenant']}): text on screen")
    table.add_column("when", no_wrap=True)
    table.add_column("text")
    table.add_column("score", justify="right")
    for span in body["text_spans"]:
        when = f"{clock(span['start_s'])}–{clock(span['end_s'])}"
        table.add_row(when, span["text"], f"{span['score']:.2f}")
    return table


def transcript(body: dict[str, Any]) -> Group:
    """The speech of a ``/v1/videos/{id}/result`` answer: a row per segment (when, what was
    said), then one line with its status and language, or why there is none."""
    speech = body.get("speech")
    segments = (speech or {}).get("segments") or []
    table = Table(title=f"{body['video']['video_id']}: speech")
    table.add_column("when", no_wrap=True)
    table.add_column("language")
    table.add_column("said")
    for segment in segments:
        when = f"{clock(segment['start_s'])}–{clock(segment['end_s'])}"
        # Text, not a markup string: what was said may hold brackets rich would read as style.
        table.add_row(when, segment.get("language") or "", Text(segment["text"].strip()))
    summary = Text("speech: ").append_text(speech_summary(speech))
    lines = [summary] if (sounds := audio_line(speech)) is None else [summary, sounds]
    return Group(table, *lines) if segments else Group(*lines)


# How many music and singing events the audio line names; the rest it counts.
_AUDIO_EVENTS_SHOWN = 8


def audio_line(speech: dict[str, Any] | None) -> Text | None:
    """The music and singing in a result's speech and when each sounds, on one line; None
    where there is none."""
    sounds = [e for e in (speech or {}).get("audio_events") or () if e["kind"] != "speech"]
    if not sounds:
        return None
    shown = [
        f"{e['kind']} {clock(e['start_s'])}–{clock(e['end_s'])}"
        for e in sounds[:_AUDIO_EVENTS_SHOWN]
    ]
    more = len(sounds) - len(shown)
    return Text(f"audio: {', '.join(shown)}{f' and {more} more' if more else ''}")


def speech_summary(speech: dict[str, Any] | None) -> Text:
    """One line on a result's speech: how much was heard and in what language, or why there
    is none (off, no audio track, failed and the reason)."""
    if speech is None:
        return Text("recognition was off for this video")
    if speech["status"] == "no_audio":
        return Text("no audio track")
    count = len(speech["segments"])
    heard = f"{clock(speech['audio_s'])} of audio, {count} segment{'' if count == 1 else 's'}"
    if speech["status"] == "failed":
        error = speech.get("error") or {}
        reason = f"{error.get('code', 'unknown')}: {error.get('message', '')}"
        return Text(f"failed after {heard}: {reason}", style="red")
    if not speech["language"]:
        return Text(f"no speech heard; {heard}")
    others = dict.fromkeys(s["language"] for s in speech["segments"] if s.get("language"))
    others.pop(speech["language"], None)
    also = f" (also {', '.join(others)})" if others else ""
    return Text(f"language {speech['language']}{also}; {heard}")


def shot_labels(body: dict[str, Any]) -> dict[int, list[dict[str, Any]]] | None:
    """Each shot's labels in a ``/v1/videos/{id}/result`` answer, by shot index (a shot
    without any has none); None where the ``shot_labels`` stage did not run."""
    segments = ((body.get("outputs") or {}).get("shot_labels") or {}).get("segments")
    if segments is None:
        return None
    return {s["attributes"]["shot"]: s["attributes"]["labels"] for s in segments}


def shots_table(body: dict[str, Any]) -> Table:
    """The shots of a ``/v1/videos/{id}/result`` answer: when, how each begins, its keyframe,
    and what is shown in it (the ``shot_labels`` stage's labels, where it ran)."""
    table = Table(title=f"{body['video']['video_id']}: shots")
    table.add_column("shot", justify="right")
    table.add_column("when", no_wrap=True)
    table.add_column("begins with")
    table.add_column("keyframe", no_wrap=True)
    labels = shot_labels(body)
    if labels is not None:
        table.add_column("shows")
    for shot in body["shots"]:
        when = f"{clock(shot['start_s'])}–{clock(shot['end_s'])}"
        keyframe = "-" if shot["keyframe_s"] is None else clock(shot["keyframe_s"])
        cells = [str(shot["index"]), when, shot["entered_by"], keyframe]
        if labels is not None:
            cells.append(scored(labels.get(shot["index"], [])) or "-")
        table.add_row(*cells)
    return table


def scored(found: Any, most: int = 5) -> str:
    """Labels with scores (``[{"name", "score"}]``) as "dog 77%, animal 77%", the first
    ``most`` of them; any other value as it is."""
    if isinstance(found, list) and all(isinstance(x, dict) and "name" in x for x in found):
        return ", ".join(
            f"{x['name']} {round(100 * float(x.get('score', 0)))}%" for x in found[:most]
        )
    return str(found)


def frames_table(frames: list[dict[str, Any]]) -> Table:
    """Each sample's OCR lines (a ``?frames=true`` answer's ``frames``), a row per sample, and
    what stages from other packages found in it, where any did."""
    table = Table(title="OCR lines per sample")
    table.add_column("at", no_wrap=True)
    table.add_column("lines")
    extras = any(frame.get("extras") for frame in frames)
    if extras:
        table.add_column("other stages")
    for frame in frames:
        cells = [clock(frame["timestamp_s"]), " | ".join(x["text"] for x in frame["ocr_lines"])]
        if extras:
            found = frame.get("extras") or {}
            cells.append(", ".join(f"{name}: {scored(found[name], 3)}" for name in sorted(found)))
        table.add_row(*cells)
    return table


# How much of a video stage's data the outputs table shows where the stage gave no segment.
_DATA_CHARS = 120


def outputs_table(body: dict[str, Any]) -> Table | None:
    """What the video stages found (a result's ``outputs``): each segment, when, of which
    kind, by which stage; a stage that gave no segment shows its data. None without any."""
    outputs: dict[str, Any] = body.get("outputs") or {}
    if not outputs:
        return None
    table = Table(title=f"{body['video']['video_id']}: video stages")
    table.add_column("stage")
    table.add_column("kind")
    table.add_column("when", no_wrap=True)
    table.add_column("found")
    for stage, output in outputs.items():
        if not output["segments"]:
            data = json.dumps(output["data"], ensure_ascii=False)
            # Its start: a large section (the review's categories) is in the result.
            shown = data if len(data) <= _DATA_CHARS else f"{data[: _DATA_CHARS - 1]}…"
            table.add_row(stage, "", "", Text(shown))
        for segment in output["segments"]:
            when = f"{clock(segment['start_s'])}–{clock(segment['end_s'])}"
            table.add_row(stage, segment["kind"], when, segment["text"])
    return table


def summary_line(body: dict[str, Any]) -> Text | None:
    """The ``summary`` stage's answer in a result: its category, tags and summary, or why it
    gave none. None where the stage did not run."""
    output = (body.get("outputs") or {}).get("summary")
    if output is None:
        return None
    data = output["data"]
    if data.get("summary") is None:
        return Text(f"summary: none ({data.get('reason', 'no reason given')})", style="yellow")
    tags = ", ".join(data.get("tags") or []) or "-"
    line = Text(f"category: {data['category']}; tags: {tags}\nsummary: ")
    return line.append(str(data["summary"]))  # text, not markup


def review_line(body: dict[str, Any]) -> Text | None:
    """The ``review`` stage's decision in a result, with each category's score and decision
    (the evidence is among the video stages' segments). None where the stage did not run."""
    output = (body.get("outputs") or {}).get("review")
    if output is None:
        return None
    data = output["data"]
    colour = {"pass": "green", "review": "yellow", "block": "red"}.get(data["decision"], "white")
    line = Text("review: ").append(data["decision"], style=colour)
    flagged = [
        f"{name} {found['score']:.2f} ({found['decision']}, {found['findings']} found)"
        for name, found in (data.get("categories") or {}).items()
        if found["findings"]
    ]
    return line.append(f" · {' · '.join(flagged)}" if flagged else "")


def duplicates_line(body: dict[str, Any]) -> Text | None:
    """The ``duplicates`` stage's finds in a result: each library video the video copies, its
    score and spans (with the other's times). None where the stage did not run."""
    output = (body.get("outputs") or {}).get("duplicates")
    if output is None:
        return None
    data = output["data"]
    found = data.get("duplicates") or []
    if not found:
        return Text(f"re-uploads: none found ({data.get('fingerprint_samples', 0)} samples)")
    line = Text("re-upload of: ", style="yellow")
    for i, other in enumerate(found):
        spans = ", ".join(
            f"{clock(s['start_s'])}–{clock(s['end_s'])} = "
            f"{clock(s['other_start_s'])}–{clock(s['other_end_s'])}"
            for s in other["spans"]
        )
        mirrored = ", mirrored" if other.get("mirrored") else ""
        line.append(("; " if i else "") + f"{other['video_id']} {other['score']:.2f}{mirrored}")
        line.append(f" ({spans})")
    return line


def stage_lines(body: dict[str, Any]) -> list[Text]:
    """The video stages' lines of a result, of those that ran: summary, review, re-uploads."""
    lines = (summary_line(body), review_line(body), duplicates_line(body))
    return [line for line in lines if line is not None]


def clock(seconds: float) -> str:
    """``m:ss.s``: 65.3 -> ``1:05.3``."""
    minutes, tenths = divmod(round(seconds * 10), 600)
    return f"{minutes}:{tenths / 10:04.1f}"
