"""Merging the image stages' outputs of a chunk: the fields the stages declare (``Stage.fills``)
are what is merged, so a new image stage's field survives beside OCR; the first output with a
value wins."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from core.config import ServiceConfig
from core.records import Chunk, Frame, OcrLine
from runtime.executor import merge_outputs
from stages.base import PIXELS, Stage
from stages.pipeline import Pipeline


class _PixelVector(Stage[Chunk, Chunk]):
    """An image stage of a kind no stage of the service is: it declares ``embedding``."""

    name = "pixel_vector"
    reads = (PIXELS,)
    fills = ("embedding",)

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        for chunk in items:
            for frame in chunk.frames:
                if frame.image is not None:
                    frame.embedding = np.full(4, frame.index + 1.0, dtype=np.float32)
        return list(items)


def _chunk() -> Chunk:
    pixels = np.zeros((8, 8, 3), dtype=np.uint8)
    return Chunk("video", 0, [Frame(i, float(i), pixels.copy()) for i in range(2)])


def _copy(chunk: Chunk) -> Chunk:
    return dataclasses.replace(chunk, frames=[dataclasses.replace(f) for f in chunk.frames])


def _read(chunk: Chunk) -> Chunk:
    """What OCR finds (by hand: the merge is what is tested)."""
    for frame in chunk.frames:
        frame.ocr_lines = [OcrLine(f"TEXT {frame.index}", 0.9, ((0, 0), (1, 0), (1, 1)))]
    return chunk


def test_a_declared_field_of_a_new_image_stage_is_kept_beside_ocr() -> None:
    plain = Pipeline.from_config(ServiceConfig.load())
    lineage = Pipeline((*plain.stages, _PixelVector())).lineage
    assert lineage.analysed_fields == ("ocr_lines", "labels", "qr", "fingerprint", "embedding")
    chunk = _chunk()
    ocr = _read(_copy(chunk))
    (vectors,) = _PixelVector().process_batch([_copy(chunk)])
    for outputs in ([ocr, vectors], [vectors, ocr]):
        merged = merge_outputs(outputs, lineage.analysed_fields)
        for frame in merged.frames:
            assert frame.ocr_text == f"TEXT {frame.index}"
            assert frame.embedding is not None
            assert frame.embedding.tolist() == [frame.index + 1.0] * 4
            assert frame.image is None
    # Only what is declared is merged.
    merged = merge_outputs([ocr, vectors], ("ocr_lines",))
    assert all(frame.embedding is None for frame in merged.frames)


def test_the_first_output_with_a_value_wins() -> None:
    fields = ("ocr_lines", "caption", "description", "image_embedding")
    first, second = _copy(_chunk()), _copy(_chunk())
    first.frames[0].caption = "first"
    second.frames[0].caption = "second"
    second.frames[1].caption = "only the second"
    second.frames[0].description = {"kind": "second"}
    first.frames[1].description = {}  # empty: the next output's value is taken
    second.frames[1].description = {"kind": "second"}
    first.frames[0].image_embedding = np.ones(2, dtype=np.float32)
    second.frames[0].image_embedding = np.zeros(2, dtype=np.float32)
    second.frames[1].image_embedding = np.zeros(2, dtype=np.float32)
    merged = merge_outputs([first, second], fields).frames
    assert [f.caption for f in merged] == ["first", "only the second"]
    assert [f.description for f in merged] == [{"kind": "second"}, {"kind": "second"}]
    assert [f.ocr_lines for f in merged] == [[], []]
    vectors = [f.image_embedding for f in merged]
    assert all(vector is not None for vector in vectors)
    assert [vector.tolist() for vector in vectors if vector is not None] == [[1, 1], [0, 0]]


class _Brightness(Stage[Chunk, Chunk]):
    """A stage from another package: what it fills is no ``Frame`` field (``Frame.extras``)."""

    name = "brightness"
    reads = (PIXELS,)
    fills = ("brightness",)

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        for chunk in items:
            for frame in chunk.frames:
                if frame.image is not None:
                    frame.extras["brightness"] = float(frame.image.mean()) + frame.index
        return list(items)


def test_an_output_that_is_no_frame_field_is_merged_in_extras() -> None:
    plain = Pipeline.from_config(ServiceConfig.load())
    lineage = Pipeline((*plain.stages, _Brightness())).lineage
    assert lineage.analysed_fields == ("ocr_lines", "labels", "qr", "fingerprint", "brightness")
    chunk = _chunk()
    ocr = _read(_copy(chunk))
    (bright,) = _Brightness().process_batch([_copy(chunk)])
    for outputs in ([ocr, bright], [bright, ocr]):
        merged = merge_outputs(outputs, lineage.analysed_fields)
        for frame in merged.frames:
            assert frame.ocr_text == f"TEXT {frame.index}"
            assert frame.extras == {"brightness": float(frame.index)}
            assert frame.output("brightness") == float(frame.index)
