"""The stages' names: the one place they are spelled (config, stages, pools, progress, timings)."""

from __future__ import annotations

from typing import Final

FETCH: Final = "fetch"
DECODE: Final = "decode"
OCR: Final = "ocr"
VLM: Final = "vlm"
EMBED: Final = "embed"

#: Every stage, in pipeline order.
ALL: Final = (FETCH, DECODE, OCR, VLM, EMBED)
#: The stages that may run inside the decode replicas (``PoolSettings.fuse``).
FUSABLE: Final = (OCR, VLM, EMBED)
