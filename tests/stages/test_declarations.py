"""What the stages declare agrees with what ``core`` lists by name (``core.stage_names``, which
may not import the stages): every stage of the service once, in pipeline order, in the registry
too, and ``FUSABLE`` the stages whose ``fusion`` lets them run inside the decode replicas."""

from __future__ import annotations

import inspect

from core.pipeline_settings import RaySettings
from core.stage_names import ALL, FUSABLE
from stages import pipeline  # noqa: F401 - imports every stage of the service
from stages.base import Fusion, Stage
from stages.registry import BUILT_IN


def _service_stages() -> list[type[Stage[object, object]]]:
    found: list[type[Stage[object, object]]] = []
    unseen: list[type[Stage[object, object]]] = list(Stage.__subclasses__())
    while unseen:
        cls = unseen.pop()
        unseen.extend(cls.__subclasses__())
        if cls.__module__.startswith("stages.") and not inspect.isabstract(cls):
            found.append(cls)
    return sorted(found, key=lambda cls: ALL.index(cls.name))


def test_every_stage_is_named_once() -> None:
    assert [cls.name for cls in _service_stages()] == list(ALL)
    assert [cls.name for cls in BUILT_IN] == list(ALL)


def test_fusable_is_what_the_stages_declare() -> None:
    stages = _service_stages()
    assert tuple(cls.name for cls in stages if cls.fusion is not Fusion.NEVER) == FUSABLE
    for cls in stages:
        if cls.fusion is not Fusion.NEVER:
            # A stage with GPUs runs in a pool of its own (``RaySettings`` refuses to fuse one).
            assert not cls.resources.gpus, cls.name
            assert cls.name in RaySettings.model_fields  # a pool whose ``fuse`` it reads
    per_core = {cls.name for cls in stages if cls.fusion is Fusion.PER_CORE}
    assert per_core == {"ocr", "labels", "qr", "fingerprint", "detect", "image_embed", "embed"}
