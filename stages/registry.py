"""Every stage the service can run: its own, and those other installed packages add.

A package adds a stage through the entry-point group ``reelsense.stages``: each entry names a
``Stage`` subclass (``my_package.stages:ObjectTags``). An installed stage runs where the
configuration names it in ``stages.plugins``, with its settings section. A stage is checked
here when it is found, so a mistake in a plug-in stops the service at start with what is wrong,
never half-way through a video:

- its name is new, short and snake_case (it names its pool, progress, timings, metrics and
  its part of the result document);
- a frames stage reads pixels and fills outputs of its own (``Frame.extras``);
- a video stage's segment kinds are its own, and it declares which of them search finds;
- a stage with GPUs is never fused into the decode replicas.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from core.outputs import BUILT_IN_SEGMENT_KINDS
from core.records import FRAME_FIELDS
from stages.base import PIXELS, Fusion, Stage, StageKind, VideoStage
from stages.chapters import ChaptersStage
from stages.decode import DecodeSampleStage
from stages.detect import DetectStage
from stages.duplicates import DuplicatesStage
from stages.embed import EmbedStage
from stages.fetch import FetchProbeStage
from stages.fingerprint import FingerprintStage
from stages.image_embed import ImageEmbedStage
from stages.labels import LabelsStage, ShotLabelsStage
from stages.ocr import OcrStage
from stages.qr import QrStage
from stages.review import ReviewStage
from stages.speech import SpeechStage
from stages.summary import SummaryStage
from stages.vlm import VlmStage

__all__ = ["BUILT_IN", "GROUP", "PluginError", "installed"]

GROUP = "reelsense.stages"

StageClass = type[Stage[Any, Any]]

#: The service's own stages, in pipeline order.
BUILT_IN: tuple[StageClass, ...] = (
    FetchProbeStage,
    DecodeSampleStage,
    OcrStage,
    LabelsStage,
    QrStage,
    FingerprintStage,
    DetectStage,
    VlmStage,
    ImageEmbedStage,
    EmbedStage,
    SpeechStage,
    ShotLabelsStage,
    ChaptersStage,
    SummaryStage,
    ReviewStage,
    DuplicatesStage,
)

_NAME = re.compile(r"[a-z][a-z0-9_]{1,39}")
# Settings sections and metric labels a stage's name must not take.
_RESERVED = frozenset({"pools", "plugins", "total", "fetch_wait", "decode_wait"})


class PluginError(ValueError):
    """An installed stage that cannot run: what is wrong with it, and which entry named it."""


@cache
def installed() -> dict[str, StageClass]:
    """Every stage by name: the service's own in pipeline order, then each installed
    package's in the order of their names. Read once per process (``installed.cache_clear()``
    after installing one at run time)."""
    found: dict[str, StageClass] = {cls.name: cls for cls in BUILT_IN}
    taken_fills = {fill for cls in BUILT_IN for fill in cls.fills}
    for entry in sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value)):
        where = f"entry point {entry.name} = {entry.value} ({GROUP})"
        try:
            cls = entry.load()
        except Exception as exc:
            raise PluginError(f"{where}: cannot be imported: {exc}") from exc
        _check(cls, where, found, taken_fills)
        found[cls.name] = cls
        taken_fills.update(cls.fills)
    return found


def _check(cls: object, where: str, found: dict[str, StageClass], taken: set[str]) -> None:
    if not isinstance(cls, type) or not issubclass(cls, Stage):
        raise PluginError(f"{where}: not a Stage subclass")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in _RESERVED:
        raise PluginError(f"{where}: name {name!r} is not 2-40 characters of [a-z0-9_]")
    if name in found:
        raise PluginError(f"{where}: the stage name {name!r} is taken")
    if cls.resources.gpus and cls.fusion is not Fusion.NEVER:
        raise PluginError(f"{where}: a stage with GPUs runs in a pool of its own (fusion)")
    if cls.kind is StageKind.FRAMES:
        _check_frames(cls, where, taken)
    elif cls.kind is StageKind.VIDEO:
        _check_video(cls, where)
    else:
        raise PluginError(f"{where}: a plug-in stage is of kind frames or video")


def _check_frames(cls: StageClass, where: str, taken: set[str]) -> None:
    if tuple(cls.reads) != (PIXELS,):
        raise PluginError(f"{where}: a frames stage reads ({PIXELS!r},), the pixels")
    if not cls.fills:
        raise PluginError(f"{where}: a frames stage fills at least one output")
    for fill in cls.fills:
        if fill in FRAME_FIELDS or fill in taken or not _NAME.fullmatch(fill):
            raise PluginError(f"{where}: it fills {fill!r}, which is not a new output name")


def _check_video(cls: StageClass, where: str) -> None:
    if not issubclass(cls, VideoStage):
        raise PluginError(f"{where}: a video stage subclasses stages.base.VideoStage")
    if PIXELS in cls.reads:
        raise PluginError(f"{where}: a video stage reads results, not pixels")
    for kind in cls.segment_kinds:
        if kind in BUILT_IN_SEGMENT_KINDS or not _NAME.fullmatch(kind):
            raise PluginError(f"{where}: segment kind {kind!r} is not one of its own")
    if not set(cls.searchable) <= set(cls.segment_kinds):
        raise PluginError(f"{where}: it makes searchable a kind it does not declare")
