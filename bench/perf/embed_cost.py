"""What the embed pool costs per text model: load time, peak memory and CPU per text.

    python -m bench.perf.embed_cost [--texts 256] [--json OUT]

Each model runs the real ``EmbedStage`` in a process of its own (``spawn``: nothing loaded
before it), one thread, over frames carrying short on-screen lines in English and Chinese,
in batches of 64 as the pool batches them. Peak resident memory is the process's high-water
mark (``VmHWM``) after setup and after the texts: what an embed replica holds on top of
Ray's worker (about 100 MiB more in a pool).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

MODELS = ("all-MiniLM-L6-v2", "multilingual-e5-small", "use-multilingual-v3")
LINES = (
    "INVOICE 2048", "欢迎光临", "SERVER ROOM B7", "数据中心", "SALE 50% OFF", "今日特价 ¥39",
    "PLATFORM 9", "北京南站", "Please check the invoice before paying", "会议九点开始",
    "EMERGENCY EXIT", "小心地滑", "OPEN 24 HOURS", "谢谢惠顾", "VECTOR SEARCH 101", "人工智能",
)  # fmt: skip


def _high_water_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _measure(model: str, texts: int) -> dict[str, Any]:
    """Runs in its own process."""
    import numpy as np

    from core.config import EmbedSettings, StageSettings
    from core.records import Chunk, Frame, OcrLine
    from stages.embed import EmbedStage

    box = ((0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0))
    started, cpu = time.monotonic(), time.process_time()
    stage = EmbedStage(StageSettings(embed=EmbedSettings(model=model, threads=1)))
    stage.setup()
    setup_s, setup_cpu = time.monotonic() - started, time.process_time() - cpu
    after_setup = _high_water_mib()
    frames = [
        Frame(i, float(i), None, ocr_lines=[OcrLine(f"{LINES[i % len(LINES)]} {i}", 0.9, box)])
        for i in range(texts)
    ]
    chunks = [Chunk("bench", i, frames[i : i + 64]) for i in range(0, texts, 64)]
    cpu = time.process_time()
    out = stage.process_batch(chunks)
    cpu_s = time.process_time() - cpu
    vectors = [f.embedding for c in out for f in c.frames if f.embedding is not None]
    stage.teardown()
    return {
        "model": model,
        "dimension": int(np.asarray(vectors[0]).size),
        "setup_s": round(setup_s, 2),
        "setup_cpu_s": round(setup_cpu, 2),
        "peak_rss_mib_after_setup": after_setup,
        "peak_rss_mib": _high_water_mib(),
        "cpu_ms_per_text": round(1000 * cpu_s / len(vectors), 2),
    }


def measure(texts: int) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    results = []
    for model in MODELS:
        with context.Pool(1) as pool:
            results.append(pool.apply(_measure, (model, texts)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    text = json.dumps(measure(args.texts), indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
