"""Errors raised by model engines. Reason codes are part of the public contract."""

from __future__ import annotations

from core.errors import PermanentError, RetryableError


class ModelLoadError(PermanentError):
    """The weights could not be loaded: a missing or broken model folder, an unknown model id."""

    code = "model_load_failed"


class ModelUnavailable(PermanentError):
    """The engine's library is not installed on this node (e.g. vLLM on a CPU-only machine)."""

    code = "model_unavailable"


class InvalidImage(PermanentError):
    """A frame the model cannot read: wrong shape, dtype or channel count."""

    code = "invalid_image"


class InvalidAudio(PermanentError):
    """Samples the model cannot take: not a 1-D float32 array, or not finite."""

    code = "invalid_audio"


class InferenceFailed(RetryableError):
    """The model failed on a batch of valid inputs; the batch may be retried."""

    code = "inference_failed"
