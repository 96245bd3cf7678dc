"""The VLM stage: what each shot shows, from a vision-language model.

By default it describes the first sample of each shot (the shot's keyframe, the one with its
thumbnail) in the JSON schema of ``core.description``, with constrained decoding: every
answer parses, and its caption also becomes the frame's text for search. It can instead
caption every sample in free text (``stages.vlm.output``, ``stages.vlm.scope``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from core.config import ServiceConfig, StageSettings
from core.description import description_schema, parse_description, schema_digest
from core.records import Chunk, Frame
from core.stage_names import VLM
from models.base import VlmEngine
from models.vlm import engine_for
from stages.base import PIXELS, Fusion, Resources, Stage

log = logging.getLogger(__name__)


class VlmStage(Stage[Chunk, Chunk]):
    """Fills ``frame.description`` and ``frame.caption`` for the frames in scope that still
    have their pixels.

    Only built when ``settings.vlm.model`` is set; frames of all chunks in a batch (possibly of
    different videos) are described together so the engine can batch them.
    """

    name = VLM
    reads = (PIXELS,)
    fills = ("caption", "description")
    # The transformers engine on CPU. The vLLM engine needs a GPU: a deployment that runs it
    # gives the pool one (``ray.vlm.num_gpus``, as deploy/config/production.yaml does).
    resources = Resources(cpus=0.5)
    # Heavy enough to batch in a pool of its own: a copy of its weights per decode replica
    # would not fit. A CPU deployment may still fuse it (``ray.vlm.fuse``).
    fusion = Fusion.IF_SET

    def __init__(self, settings: StageSettings) -> None:
        if not settings.vlm.model:
            raise ValueError("VlmStage needs settings.vlm.model")
        self._settings = settings
        self._engine: VlmEngine | None = None
        self._continuous = False

    @classmethod
    def build(cls, config: ServiceConfig) -> VlmStage | None:
        return cls(config.stages) if config.stages.vlm.model else None

    def version_params(self) -> Mapping[str, object]:
        # The engine is part of the version: vLLM and transformers kernels differ numerically,
        # and greedy decoding can follow a different path from a tiny difference.
        s = self._settings
        described = s.vlm.output == "description"
        return {
            "model": s.vlm.model,
            "engine": s.vlm.engine,
            "output": s.vlm.output,
            "scope": self._scope,
            "prompt": s.vlm.description_prompt if described else s.vlm.prompt,
            "schema": schema_digest() if described else None,
            "max_new_tokens": s.vlm.description_max_tokens if described else s.vlm.max_new_tokens,
            "max_pixels": s.vlm.max_pixels,
            "decoding": "greedy",
        }

    @property
    def _scope(self) -> str:
        """What is described: shot starts, or (without shot boundaries to go by) samples."""
        s = self._settings
        detects = s.shot_detection or s.sample_mode == "shots"
        return "shots" if s.vlm.scope == "shots" and detects else "samples"

    def _in_scope(self, frame: Frame) -> bool:
        return self._scope == "samples" or frame.index == 0 or bool(frame.boundaries)

    @property
    def batches_continuously(self) -> bool:
        """Whether the engine batches requests itself as they come (vLLM's async engine): a
        pool then sends it each chunk at once instead of gathering chunks into batches."""
        return self._settings.vlm.engine == "vllm"

    def serve_continuously(self) -> None:
        """Set up the async engine (``process_async``), before ``setup``."""
        self._continuous = True

    def setup(self) -> None:
        engine = engine_for(self._settings, continuous=self._continuous)
        engine.load()
        self._engine = engine

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        frames = self._selected(items)
        if frames:
            prompt, max_tokens, schema = self._request()
            images = [frame.image for frame in frames if frame.image is not None]
            self._fill(frames, self._ready().caption(images, prompt, max_tokens, schema))
        return list(items)

    async def process_async(self, chunk: Chunk) -> Chunk:
        """``process_batch`` of one chunk, its frames sent to the engine at once."""
        frames = self._selected([chunk])
        if frames:
            prompt, max_tokens, schema = self._request()
            images = [frame.image for frame in frames if frame.image is not None]
            answers = await self._ready().caption_async(images, prompt, max_tokens, schema)
            self._fill(frames, answers)
        return chunk

    def _ready(self) -> VlmEngine:
        if self._engine is None:
            raise RuntimeError("VlmStage.setup() must run before it processes chunks")
        return self._engine

    def _selected(self, items: Sequence[Chunk]) -> list[Frame]:
        """The frames to answer for: in scope and with their pixels."""
        return [
            frame
            for chunk in items
            for frame in chunk.frames
            if frame.image is not None and self._in_scope(frame)
        ]

    def _request(self) -> tuple[str, int, Mapping[str, object] | None]:
        """The prompt, token budget and schema (None for free text) of every request."""
        s = self._settings
        if s.vlm.output == "description":
            return s.vlm.description_prompt, s.vlm.description_max_tokens, description_schema()
        return s.vlm.prompt, s.vlm.max_new_tokens, None

    def _fill(self, frames: list[Frame], answers: list[str]) -> None:
        if len(answers) != len(frames):
            raise RuntimeError(f"{len(answers)} answers for {len(frames)} frames")
        described = self._settings.vlm.output == "description"
        for frame, answer in zip(frames, answers, strict=True):
            if not described:
                frame.caption = answer
                continue
            try:
                description = parse_description(answer)
            except ValueError:  # cut short by the token budget: no description
                log.warning(
                    "frame %d: the VLM's answer did not complete within %d tokens",
                    frame.index,
                    self._settings.vlm.description_max_tokens,
                )
                continue
            frame.description = description.model_dump()
            frame.caption = description.caption

    def teardown(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
