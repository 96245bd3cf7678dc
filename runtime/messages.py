"""What the outbox events of a video say (the webhooks and the status topic carry them)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from core.records import VideoResult
from core.shots import video_shots
from core.speech import SOUND_KINDS, Speech
from core.stage_names import DUPLICATES, REVIEW, SUMMARY
from sinks.object_store import document_key
from stages.chapters import chapters_of

# The start of the text a `video.done` message carries; the rest is in the result document.
DONE_TEXT_CHARS = 1000
# And the start of the summary, where the summary stage wrote one.
DONE_SUMMARY_CHARS = 280


def done_message_data(result: VideoResult) -> dict[str, Any]:
    """What ``video.done`` says: counts, the start of the text and where the whole result is,
    never all of it, so the message stays small whatever the video holds (a status-topic
    record has 1 MiB, and receivers refuse large bodies)."""
    text = result.text
    return {
        "frames": len(result.frames),
        "duration_s": result.probe.duration_s,
        "text": text[:DONE_TEXT_CHARS],
        "text_truncated": len(text) > DONE_TEXT_CHARS,
        "text_lines": text.count("\n") + 1 if text else 0,
        "text_chars": len(text),
        "shots": len(video_shots(result.frames, result.probe.duration_s)),
        "speech": _speech_summary(result.speech),
        # None where the stage did not run (off, or the result is older than it).
        "chapters": None if (chapters := chapters_of(result)) is None else len(chapters),
        "summary": _summary(result),
        "review": review_summary(result),
        "duplicates": duplicates_found(result),
        "timings": result.timings,
        "result": _links(result),
    }


def _links(result: VideoResult) -> dict[str, str]:
    """Where the video's status, result and stored document are."""
    ref = result.ref
    return {
        "status": f"/v1/videos/{quote(ref.video_id, safe='')}",
        "api": f"/v1/videos/{quote(ref.video_id, safe='')}/result",
        "document": document_key(ref.tenant, ref.video_id, result.pipeline_version),
    }


def _summary(result: VideoResult) -> dict[str, Any] | None:
    """The summary stage's answer, its summary cut at ``DONE_SUMMARY_CHARS``; None where it
    did not run or gave none."""
    output = result.outputs.get(SUMMARY)
    if output is None or output.data.get("summary") is None:
        return None
    text = str(output.data["summary"])
    return {
        "text": text[:DONE_SUMMARY_CHARS],
        "truncated": len(text) > DONE_SUMMARY_CHARS,
        "category": output.data.get("category"),
        "tags": list(output.data.get("tags") or []),
    }


def review_message_data(result: VideoResult) -> dict[str, Any] | None:
    """What ``video.review`` says, for a video the review stage did not pass: its decision and
    categories (``review_summary``) and where the evidence is; None for one it passed."""
    review = review_summary(result)
    if review is None or review["decision"] == "pass":
        return None
    return {**review, "result": _links(result)}


def review_summary(result: VideoResult) -> dict[str, Any] | None:
    """The review stage's decision and each category's score, decision and number of
    findings (the evidence is in the result); None where it did not run."""
    output = result.outputs.get(REVIEW)
    if output is None or "decision" not in output.data:
        return None
    categories = output.data.get("categories") or {}
    return {
        "decision": output.data["decision"],
        "categories": {
            name: {key: found.get(key) for key in ("score", "decision", "findings")}
            for name, found in categories.items()
        },
    }


def duplicates_found(result: VideoResult) -> list[dict[str, Any]] | None:
    """The library videos this one copies (``stages.duplicates``): each one's id, score and
    spans, the best first; None where the stage did not run."""
    output = result.outputs.get(DUPLICATES)
    if output is None:
        return None
    return [
        {key: found.get(key) for key in ("video_id", "score", "mirrored", "spans")}
        for found in output.data.get(DUPLICATES) or ()
    ]


def _speech_summary(speech: Speech | None) -> dict[str, Any] | None:
    """How the speech went, the start of what was said and the seconds of music and singing
    heard (the transcript and the audio events are in the result)."""
    if speech is None:
        return None
    text = speech.text
    heard = speech.event_seconds()
    return {
        "status": speech.status,
        "language": speech.language,
        "segments": len(speech.segments),
        "text": text[:DONE_TEXT_CHARS],
        "text_truncated": len(text) > DONE_TEXT_CHARS,
        "audio_events": {f"{kind}_s": heard[kind] for kind in SOUND_KINDS},
        "error": speech.error,
    }
