"""The llama.cpp engine with the packaged SmolLM2: answers valid in the schema, the same each
time, and each way it can fail named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from models.errors import InferenceFailed, ModelLoadError
from models.llm import SMOLLM2, ContextExceeded, LlamaCppModel, packaged_smollm2

SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "minLength": 1, "maxLength": 200},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 3},
        "category": {"type": "string", "enum": ["food and drink", "sports", "other"]},
    },
    "required": ["summary", "tags", "category"],
    "additionalProperties": False,
}
ASK = [
    {"role": "system", "content": "Summarise the video. Give tags and a category."},
    {"role": "user", "content": "Transcript: Knead the dough, let it rise, bake the bread."},
]


@pytest.fixture(scope="module")
def model() -> Iterator[LlamaCppModel]:
    loaded = LlamaCppModel(SMOLLM2, context_tokens=1024)
    loaded.load()
    yield loaded
    loaded.close()


def test_the_answer_is_valid_in_the_schema_and_the_same_each_time(model: LlamaCppModel) -> None:
    first = model.answer(ASK, SCHEMA, max_tokens=256)
    jsonschema.validate(first, SCHEMA)
    assert model.answer(ASK, SCHEMA, max_tokens=256) == first


def test_the_model_id_names_the_file_and_its_digest() -> None:
    model_id = LlamaCppModel(SMOLLM2).model_id
    assert model_id.startswith("llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf@")
    assert packaged_smollm2().is_file()


def test_an_answer_cut_at_its_budget_is_a_failure(model: LlamaCppModel) -> None:
    with pytest.raises(InferenceFailed, match="cut at 8 tokens"):
        model.answer(ASK, SCHEMA, max_tokens=8)


def test_a_prompt_longer_than_the_context_is_context_exceeded(model: LlamaCppModel) -> None:
    long = [{"role": "user", "content": "bread " * 3000}]
    with pytest.raises(ContextExceeded):
        model.answer(long, SCHEMA, max_tokens=64)


def test_a_missing_or_broken_model_file_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no GGUF model"):
        LlamaCppModel(str(tmp_path / "absent.gguf")).load()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(bytes(range(256)) * 16)
    with pytest.raises(ModelLoadError, match=r"llama\.cpp cannot load"):
        LlamaCppModel(str(broken)).load()
