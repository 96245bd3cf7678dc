"""The quality harness's corpus: a fixed set of edits (``devkit.edited_videos``) whose truth is
known, and where their videos are written.

Every shot's texture comes from its seed, so the same edit is the same video on every run. The
full corpus covers what tells shot and text detection apart from the easy case: cuts between
still and panning shots (30 to 480 px/s), dissolves and fades of 0.5 to 1.5 s, single-frame
flashes (not boundaries), short shots, and English and Chinese captions shown from mid-shot,
held across a cut, ended mid-shot, changed in place, and two at once (a sign at the top).

Some edits speak: English sentences said by espeak-ng (``devkit.speech_videos``) from known times,
mid-shot, across a cut or a transition, and in ``mixed`` across the 30 s edge between two
windows of speech recognition, with silence between them. Their words have no digits or
spelling variants ("center", not "centre"), which a word error rate would count as errors of
the test rather than of recognition. ``bench.quality.talks`` adds edits that only talk: across
window ends, and in German and Spanish (an edit's ``languages``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from devkit import edited_videos, speech_videos
from devkit.edited_videos import Caption, EditTruth, Shot, edit_truth, write_edit
from devkit.speech_videos import Utterance, mux_audio, synthesize, voiced_span

FPS = 25
SIZE = (640, 360)
VOICE = "en"  # espeak-ng's English voice, and Whisper's name of the language


@dataclass(frozen=True)
class Edit:
    """A named edit and what it is meant to test; ``speech``: sentences spoken from the given
    seconds into the edit (none: the edit has no audio track); ``languages``: the language of
    each of them (ISO 639-1, which is also the espeak-ng voice that says it), none: all
    English."""

    name: str
    about: str
    shots: tuple[Shot, ...]
    speech: tuple[tuple[float, str], ...] = ()
    languages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.languages and len(self.languages) != len(self.speech):
            raise ValueError(f"{self.name}: one language per sentence, or none")

    def voices(self) -> tuple[str, ...]:
        """The language of each sentence of ``speech``."""
        return self.languages or (VOICE,) * len(self.speech)

    @property
    def english(self) -> bool:
        """Whether every sentence is English (so the edit's words count in the English WER)."""
        return all(voice == VOICE for voice in self.voices())


_QUICK = (
    Edit(
        "clean-cuts",
        "still shots, two hard cuts, one English caption mid-shot; a sentence mid-shot, one "
        "across a cut",
        (
            Shot(2.5, seed=1),
            Shot(2.5, seed=2, caption="PLATFORM 9", caption_from_s=0.5),
            Shot(2.5, seed=3),
        ),
        speech=(
            (0.3, "Good morning and welcome aboard."),
            (4.0, "Mind the gap between the train and the platform."),
        ),
    ),
    Edit(
        "dissolve-flash",
        "a flash in a still shot, a 1 s dissolve into a slow pan with a Chinese caption",
        (
            Shot(2.5, seed=4, flash_at_s=1.0),
            Shot(
                3.5,
                "dissolve",
                1.0,
                pan_px_per_s=40,
                caption="欢迎光临",
                caption_from_s=1.0,
                seed=5,
            ),
        ),
    ),
)

_FULL = (
    Edit(
        "cuts-still",
        "hard cuts between still shots; English captions from mid-shot; speech",
        (
            Shot(4.0, seed=11),
            Shot(3.5, seed=12, caption="PLATFORM 9", caption_from_s=1.0),
            Shot(4.0, seed=13),
            Shot(3.0, seed=14, caption="EXIT 12", caption_from_s=0.5),
            Shot(3.5, seed=15),
        ),
        speech=(
            (0.5, "Welcome to the data center tour."),
            (6.4, "The exit is on your left after the stairs."),
            (12.0, "Everything in the shop is on sale this week."),
        ),
    ),
    Edit(
        "cuts-pans",
        "hard cuts between still shots and pans of 30 to 480 px/s; a caption over a pan",
        (
            Shot(3.0, seed=21),
            Shot(4.0, pan_px_per_s=30, caption="SALE 50%", caption_from_s=1.2, seed=22),
            Shot(3.0, pan_px_per_s=240, seed=23),
            Shot(3.5, seed=24),
            Shot(3.0, pan_px_per_s=480, seed=25),
            Shot(3.5, pan_px_per_s=-60, caption="数据中心", caption_from_s=0.8, seed=26),
        ),
    ),
    Edit(
        "dissolves",
        "dissolves of 0.5, 1.0 and 1.5 s between still and panning shots; speech across a "
        "dissolve and a cut",
        (
            Shot(4.0, seed=31),
            Shot(
                4.5,
                "dissolve",
                0.5,
                pan_px_per_s=40,
                caption="欢迎光临",
                caption_from_s=1.5,
                seed=32,
            ),
            Shot(4.5, "dissolve", 1.0, seed=33),
            Shot(4.5, "dissolve", 1.5, pan_px_per_s=120, seed=34),
            Shot(4.0, "cut", caption="EXIT 12", caption_from_s=1.0, seed=35),
        ),
        speech=(
            (3.0, "Our next stop is the central library."),
            (9.5, "Please keep your bags with you at all times."),
            (17.8, "The doors are closing, please stand clear."),
        ),
    ),
    Edit(
        "fades",
        "fades through black of 0.5, 1.0 and 1.5 s; one into a fast pan",
        (
            Shot(4.0, caption="数据中心", caption_from_s=1.0, seed=41),
            Shot(4.0, "fade", 0.5, seed=42),
            Shot(4.5, "fade", 1.0, pan_px_per_s=200, seed=43),
            Shot(4.5, "fade", 1.5, caption="SALE 50%", caption_from_s=1.0, seed=44),
            Shot(3.0, "cut", seed=45),
        ),
    ),
    Edit(
        "flashes",
        "single white frames in still and panning shots, one 0.6 s after a cut: no boundaries",
        (
            Shot(4.0, flash_at_s=2.0, seed=51),
            Shot(4.0, pan_px_per_s=60, flash_at_s=1.5, seed=52),
            Shot(3.5, flash_at_s=0.6, caption="EXIT 12", caption_from_s=1.5, seed=53),
            Shot(3.5, "dissolve", 1.0, flash_at_s=2.0, seed=54),
            Shot(3.0, pan_px_per_s=150, flash_at_s=1.0, seed=55),
        ),
    ),
    Edit(
        "held-captions",
        "captions held across cuts, ended mid-shot, changed in place, and a top sign; speech",
        (
            Shot(4.0, caption="SALE 50%", caption_from_s=1.0, seed=61),
            Shot(3.5, pan_px_per_s=50, caption="SALE 50%", seed=62),
            Shot(
                4.0,
                caption="PLATFORM 9",
                caption_until_s=2.5,
                more_captions=(Caption("数据中心", 0.5, where="top"),),
                seed=63,
            ),
            Shot(3.0, caption="欢迎光临", seed=64),
            Shot(4.5, caption="欢迎光临", caption_until_s=3.0, seed=65),
            Shot(
                4.0,
                caption="EXIT 12",
                caption_until_s=2.0,
                seed=66,
                more_captions=(Caption("EXIT 13", 2.0),),
            ),
        ),
        speech=(
            (1.0, "Tickets can be bought at the machine by the entrance."),
            (14.0, "The weather today is warm and sunny."),
            (19.8, "This evening the museum closes early."),
        ),
    ),
    Edit(
        "short-shots",
        "quick cutting: shots of 0.6 to 1.5 s, some captioned, a short dissolve and fade",
        (
            Shot(1.5, seed=71),
            Shot(0.8, caption="EXIT 12", seed=72),
            Shot(1.2, pan_px_per_s=100, seed=73),
            Shot(0.6, seed=74),
            Shot(1.0, caption="欢迎光临", seed=75),
            Shot(1.5, "dissolve", 0.5, seed=76),
            Shot(0.8, seed=77),
            Shot(1.5, "fade", 0.5, seed=78),
            Shot(2.0, caption="SALE 50%", caption_from_s=0.5, seed=79),
        ),
    ),
    Edit(
        "mixed",
        "a longer mix: pans across cuts, dissolves and fades, flashes, captions; speech, the "
        "last across a cut and the 30 s edge of the recogniser's window",
        (
            Shot(3.0, pan_px_per_s=80, seed=81),
            Shot(3.5, pan_px_per_s=80, caption="PLATFORM 9", caption_from_s=0.7, seed=82),
            Shot(4.0, "dissolve", 1.2, flash_at_s=2.5, seed=83),
            Shot(3.0, "fade", 0.8, pan_px_per_s=300, seed=84),
            Shot(3.5, caption="数据中心", caption_from_s=1.3, seed=85),
            Shot(4.0, "dissolve", 0.6, pan_px_per_s=20, seed=86),
            Shot(2.5, caption="EXIT 12", caption_until_s=1.5, seed=87),
            Shot(3.5, "fade", 1.2, caption="SALE 50%", caption_from_s=0.5, seed=88),
            Shot(3.0, pan_px_per_s=-120, flash_at_s=1.2, seed=89),
        ),
        speech=(
            (1.0, "Please open the seminar room now."),
            (13.6, "The train to the coast leaves from this platform."),
            (29.2, "Thank you for riding with us."),
        ),
    ),
)


def corpus(quick: bool) -> tuple[Edit, ...]:
    """The two short edits of ``--quick``, or the full corpus."""
    return _QUICK if quick else _FULL


def _digest(spec: object) -> str:
    return hashlib.sha256(repr(spec).encode()).hexdigest()[:12]


def write_corpus(edits: Sequence[Edit], folder: Path) -> list[EditTruth]:
    """The edits' videos, written unless written before: a file is named after the shots, the
    speech, the frame rate, the size and the code that draws and mixes them, so a changed edit
    gets a new file."""
    code = b"".join(Path(m.__file__ or "").read_bytes() for m in (edited_videos, speech_videos))
    truths = []
    for edit in edits:
        spoken = [
            (start, text, _sentence(text, voice, folder / "speech"))
            for (start, text), voice in zip(edit.speech, edit.voices(), strict=True)
        ]
        voices = edit.languages or VOICE  # an English edit's name as before languages came
        name = _digest((edit.shots, edit.speech, voices, FPS, SIZE, hashlib.sha256(code).digest()))
        path = folder / f"{edit.name}-{name}.mp4"
        if not path.is_file():
            # Written aside and renamed, so an interrupted run leaves no half video to reuse.
            partial = path.with_suffix(".partial.mp4")
            write_edit(partial, edit.shots, fps=FPS, size=SIZE)
            if spoken:
                silent, partial = partial, path.with_suffix(".speech.partial.mp4")
                mux_audio(silent, [(start, wav) for start, _, wav in spoken], partial)
                silent.unlink()
            partial.replace(path)
        truth = edit_truth(path, edit.shots, FPS)
        utterances = tuple(_utterance(text, start, wav) for start, text, wav in spoken)
        if any(u.end_s > truth.duration_s for u in utterances):
            # The audio track would outlast the picture, and the video's duration change.
            raise ValueError(f"{edit.name}: speech runs past the end of the video")
        truths.append(replace(truth, utterances=utterances))
    return truths


def _sentence(text: str, voice: str, folder: Path) -> Path:
    """The sentence spoken into a WAV, unless spoken before (named after the text and voice)."""
    wav = folder / f"{_digest((text, voice))}.wav"
    if not wav.is_file():
        partial = wav.with_suffix(".partial.wav")
        synthesize(text, partial, voice)
        partial.replace(wav)
    return wav


def _utterance(text: str, start_s: float, wav: Path) -> Utterance:
    """Where the voice of a sentence played from ``start_s`` is: its first to its last sound,
    not the WAV's span (espeak-ng ends each with about 0.3 s of silence)."""
    first, last = voiced_span(wav)
    return Utterance(text, start_s + first, start_s + last)
