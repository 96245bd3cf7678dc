"""Model files are identified by what they hold: new weights under an old path give a new id,
and with it a new stage version."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from models.errors import ModelLoadError
from models.fingerprint import content_id
from models.image_embedding import ClipEmbedder
from models.llm import LlamaCppModel
from models.vlm import TransformersVlmEngine

MIB = 1 << 20


def model_folder(root: Path, weights: bytes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text('{"hidden_size": 8}')
    (root / "model.safetensors").write_bytes(weights)
    return root


def big_weights(byte_at: int | None = None) -> bytes:
    data = bytearray(bytes(range(256)) * (40 * MIB // 256))  # 40 MiB
    if byte_at is not None:
        data[byte_at] ^= 0xFF
    return bytes(data)


def test_the_same_content_anywhere_is_the_same_id(tmp_path: Path) -> None:
    one = model_folder(tmp_path / "a", b"weights")
    two = model_folder(tmp_path / "b", b"weights")
    assert content_id(one) == content_id(two)
    os.utime(two / "model.safetensors", (1, 1))  # touched, not changed
    assert content_id(two) == content_id(one)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda f: model_folder(f, big_weights(byte_at=10)), "a byte of the first MiB"),
        (lambda f: model_folder(f, big_weights(byte_at=40 * MIB - 10)), "a byte of the last MiB"),
        (lambda f: model_folder(f, big_weights() + b"x"), "one byte more"),
        (lambda f: (f / "tokenizer.json").write_text("{}"), "a file more"),
        (lambda f: (f / "config.json").write_text('{"hidden_size": 9}'), "the configuration"),
    ],
)
def test_new_weights_under_the_same_path_are_a_new_id(tmp_path: Path, change, why) -> None:  # type: ignore[no-untyped-def]
    folder = model_folder(tmp_path / "model", big_weights())
    before = content_id(folder)
    change(folder)
    assert content_id(folder) != before, why


def test_the_engines_name_their_weights_by_content(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "vlm", b"first weights")
    vlm, clip = TransformersVlmEngine(str(folder)), ClipEmbedder(str(folder))
    ids = (vlm.model_id, clip.model_id)
    model_folder(folder, b"other weights")
    assert vlm.model_id != ids[0]
    assert clip.model_id != ids[1]
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF one")
    first = LlamaCppModel(str(gguf)).model_id
    gguf.write_bytes(b"GGUF two")
    assert LlamaCppModel(str(gguf)).model_id != first


def test_a_missing_or_empty_model_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no model at"):
        content_id(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no model files"):
        content_id(tmp_path / "empty")
