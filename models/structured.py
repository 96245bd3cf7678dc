"""Constrained decoding for the transformers engine: the model may only write JSON that
matches a schema.

``outlines_core`` turns the schema into a regular expression and the regular expression, with
the tokenizer's vocabulary, into an index of which tokens may follow in each state. During
generation a logits processor keeps one guide per row of the batch, advances it with the token
the row just produced and masks every token the guide does not allow, so the answer always
parses (as long as it is not cut short: the schemas bound every string and list so that a
complete answer fits the token budget). vLLM applies the same schema with its own structured
outputs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from models.errors import ModelLoadError

# Compact JSON: no whitespace between tokens of the structure, so a model cannot spend its
# budget on spaces and newlines.
_NO_WHITESPACE = ""


@cache
def _byte_of_char() -> dict[str, int]:
    """The inverse of the byte-to-character table of byte-level BPE (GPT-2, Qwen2): printable
    bytes stand for themselves, the others for characters from 256 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return {char: b for b, char in chars.items()}


def _decoder_type(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return ""
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    return str(decoder.get("type", ""))


def token_bytes(tokenizer: Any) -> dict[int, bytes]:
    """The bytes each ordinary token of a Hugging Face fast tokenizer writes (special tokens
    left out): byte-level BPE characters mapped back to bytes, SentencePiece's ``▁`` as a
    space and ``<0xNN>`` as that byte, other tokens as their UTF-8."""
    special = set(tokenizer.all_special_ids)
    byte_level = _decoder_type(tokenizer) == "ByteLevel"
    to_byte = _byte_of_char()
    found: dict[int, bytes] = {}
    for token, token_id in tokenizer.get_vocab().items():
        if token_id in special or token in tokenizer.get_added_vocab():
            continue
        if byte_level:
            if any(char not in to_byte for char in token):
                continue  # not a byte-level token (an added word): never needed for JSON
            found[token_id] = bytes(to_byte[char] for char in token)
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            found[token_id] = bytes([int(token[3:5], 16)])
        else:
            found[token_id] = token.replace("\u2581", " ").encode()
    return found


class JsonConstraint:
    """A schema compiled against one tokenizer's vocabulary; ``processor()`` makes a fresh
    logits processor for one ``generate`` call."""

    def __init__(self, schema: Mapping[str, Any], tokenizer: Any, eos_token_id: int) -> None:
        try:
            from outlines_core import Index, Vocabulary
            from outlines_core.json_schema import build_regex_from_schema
        except ImportError as exc:
            raise ModelLoadError(f"outlines-core is not installed: {exc}") from exc
        regex = build_regex_from_schema(json.dumps(schema), _NO_WHITESPACE)
        by_bytes: dict[bytes, list[int]] = {}
        for token_id, data in token_bytes(tokenizer).items():
            if data:
                by_bytes.setdefault(data, []).append(token_id)
        try:
            vocabulary = Vocabulary(eos_token_id, by_bytes)
            self._index = Index(regex, vocabulary)
        except Exception as exc:  # the vocabulary cannot write what the schema needs
            raise ModelLoadError(f"cannot constrain this tokenizer to the schema: {exc}") from exc
        self.eos_token_id = eos_token_id

    def processor(self) -> JsonLogitsProcessor:
        return JsonLogitsProcessor(self._index, self.eos_token_id)


class JsonLogitsProcessor:
    """Masks, row by row, every token the schema does not allow next (a transformers logits
    processor: called with the ids so far and the next token's scores)."""

    def __init__(self, index: Any, eos_token_id: int) -> None:
        self._index = index
        self._eos = eos_token_id
        self._guides: list[Any] | None = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch
        from outlines_core import Guide

        if self._guides is None:  # the first step: nothing generated yet
            self._guides = [Guide(self._index) for _ in range(input_ids.shape[0])]
        else:
            for guide, token in zip(self._guides, input_ids[:, -1].tolist(), strict=True):
                if not guide.is_finished():
                    guide.advance(int(token))
        mask = torch.full_like(scores, float("-inf"))
        for row, guide in enumerate(self._guides):
            # A finished row (its answer complete) only pads with the end token.
            allowed = [self._eos] if guide.is_finished() else list(guide.get_tokens())
            mask[row, [t for t in allowed if t < scores.shape[1]]] = 0.0
        return scores + mask
