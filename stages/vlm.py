"""The VLM stage: a caption for each frame from a vision-language model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.config import StageSettings
from core.records import Chunk, Frame, Image
from core.stage_names import VLM
from models.base import VlmEngine
from models.vlm import engine_for
from stages.base import Resources, Stage


class VlmStage(Stage[Chunk, Chunk]):
    """Fills ``frame.caption`` for every frame that still has its pixels.

    Only built when ``settings.vlm_model`` is set; frames of all chunks in a batch (possibly of
    different videos) are captioned together so the engine can batch them.
    """

    name = VLM
    fills = ("caption",)
    # The transformers engine on CPU. The vLLM engine needs a GPU: a deployment that runs it
    # gives the pool one (``ray.vlm.num_gpus``, as deploy/config/production.yaml does).
    resources = Resources(cpus=0.5)

    def __init__(self, settings: StageSettings) -> None:
        if not settings.vlm_model:
            raise ValueError("VlmStage needs settings.vlm_model")
        self._settings = settings
        self._engine: VlmEngine | None = None

    def version_params(self) -> Mapping[str, object]:
        # The engine is part of the version: vLLM and transformers kernels differ numerically,
        # and greedy decoding can follow a different path from a tiny difference.
        return {
            "model": self._settings.vlm_model,
            "engine": self._settings.vlm_engine,
            "prompt": self._settings.vlm_prompt,
            "max_new_tokens": self._settings.vlm_max_new_tokens,
            "max_pixels": self._settings.vlm_max_pixels,
            "decoding": "greedy",
        }

    def setup(self) -> None:
        engine = engine_for(self._settings)
        engine.load()
        self._engine = engine

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        if self._engine is None:
            raise RuntimeError("VlmStage.setup() must run before process_batch()")
        frames: list[Frame] = []
        images: list[Image] = []
        for chunk in items:
            for frame in chunk.frames:
                if frame.image is not None:
                    frames.append(frame)
                    images.append(frame.image)
        if images:
            captions = self._engine.caption(
                images, self._settings.vlm_prompt, self._settings.vlm_max_new_tokens
            )
            if len(captions) != len(frames):
                raise RuntimeError(f"{len(captions)} captions for {len(frames)} frames")
            for frame, caption in zip(frames, captions, strict=True):
                frame.caption = caption
        return list(items)

    def teardown(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
