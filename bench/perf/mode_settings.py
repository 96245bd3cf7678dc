"""The settings ``bench.perf.pipeline`` tries in each mode, every one reported: Ray Data's actors
and blocks, and the streaming service's pools, videos in flight and chunk sizes."""

from __future__ import annotations

from typing import Any

# Ray Data settings tried, every one reported. Per-actor CPUs stay fractional: with a whole
# CPU per actor on 2 cores Ray Data waits for resources forever.
RAYDATA_SETTINGS: dict[str, dict[str, Any]] = {
    "rd-1x1-b8": {"frames_per_block": 8, "ocr_actors": 1, "ocr_batch": 8},
    "rd-1x2-b8": {"frames_per_block": 8, "ocr_actors": 2, "ocr_cpus": 0.5, "ocr_batch": 8},
    "rd-2x2-b4": {
        "decode_actors": 2,
        "decode_cpus": 0.4,
        "frames_per_block": 4,
        "ocr_actors": 2,
        "ocr_cpus": 0.4,
        "ocr_batch": 4,
    },
    "rd-video-blocks-t2": {
        "frames_per_block": 64,
        "decode_threads": 2,
        "ocr_actors": 1,
        "ocr_cpus": 0.9,
        "ocr_threads": 2,
        "ocr_batch": 32,
    },
    "rd-2x1-t2-b8": {
        "decode_actors": 2,
        "decode_cpus": 0.4,
        "frames_per_block": 8,
        "ocr_actors": 1,
        "ocr_cpus": 0.9,
        "ocr_threads": 2,
        "ocr_batch": 8,
    },
}
QUICK_RAYDATA = ("rd-1x2-b8",)

# reelsense settings tried, every one reported: consumer in-flight videos, OCR replicas, chunk
# size. "st-default" is the service's own configuration: on a local Ray, its per_core
# placement profile (runtime/placement.py). "st-pools" and the "st-ocr2" family keep a pool
# per stage, sized by hand for 2 cores (bench/modes/streaming.py); "st-fused2" is per_core
# written out by hand, without splitting a video over idle replicas.
_TWO_OCR = {"ocr": {"min_replicas": 2, "max_replicas": 2, "num_cpus": 0.4}}
_POOLS: dict[str, Any] = {"placement": "pools", "max_in_flight": 4}
_FUSED2: dict[str, Any] = {
    "pools": {
        "decode": {"min_replicas": 2, "max_replicas": 2, "num_cpus": 0.9},
        "ocr": {"fuse": True},
        "embed": {"fuse": True},
    },
    "max_in_flight": 3,
    "videos_decoding": 2,
}
STREAMING_SETTINGS: dict[str, dict[str, Any]] = {
    "st-default": {},
    "st-pools": _POOLS,
    "st-ocr2": {**_POOLS, "pools": _TWO_OCR},
    "st-ocr2-mif2": {**_POOLS, "pools": _TWO_OCR, "max_in_flight": 2},
    "st-ocr2-mif2-c4": {**_POOLS, "pools": _TWO_OCR, "max_in_flight": 2, "chunk_frames": 4},
    "st-ocr2-mif3-vd2": {**_POOLS, "pools": _TWO_OCR, "max_in_flight": 3, "videos_decoding": 2},
    "st-ocr2-dt2": {**_POOLS, "pools": _TWO_OCR, "decode_threads": 2},
    # OCR and embeddings fused into two decode replicas: one video per core end to end.
    "st-fused2": _FUSED2,
    # The same on a cluster of two one-CPU worker nodes on this machine: what crossing
    # raylets costs (chunks and results travel between nodes' object stores).
    "cl-fused2": {**_FUSED2, "nodes": 2},
    "cl-ocr2": {**_POOLS, "pools": _TWO_OCR, "nodes": 2},
}
QUICK_STREAMING = ("st-default",)
