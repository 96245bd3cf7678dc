"""Shot boundaries from the frames the decoder decodes anyway, and repeated samples.

Every decoded frame is reduced to a *signature*: its Y, U and V planes averaged down to a few
hundred cells (read straight from the decoded planes, without a colour conversion, so it costs
microseconds next to the decoding). Two signatures differ by the mean absolute difference of
their cells, 0-255, the three planes weighted alike (as PySceneDetect's content detector weighs
hue, saturation and luma).

``ShotDetector`` finds

- **hard cuts**: a frame that differs from the one before by at least ``cut_change`` and by
  ``cut_ratio`` times the recent frame-to-frame change (so fast motion does not read as cuts),
  confirmed one frame later: the frame after must differ from the one before the cut too, so a
  flash (one bright frame, then the same scene) is not a cut;
- **gradual transitions** (dissolves, fades), by twin comparison: a run of frames each changing
  more than the scene's usual noise, which ends (the picture holds still again) at least
  ``gradual_change`` away from where it began, within ``max_transition_s``. A run that goes on
  longer is motion, not a transition.

Boundaries closer than ``min_shot_s`` to the previous one are dropped.
"""

from __future__ import annotations

import functools
import statistics
from collections import deque
from dataclasses import dataclass, field

import av
import numpy as np
import numpy.typing as npt

from core.records import ShotBoundary

Signature = npt.NDArray[np.float32]  # 3 x GRID_H x GRID_W

GRID_W, GRID_H = 32, 18
_PLANAR_8BIT = frozenset(
    {"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "yuv440p", "yuvj440p"}
)
_HISTORY = 8  # changes remembered for the cut ratio and the noise level
_NOISE_FLOOR = 1.5  # the least change over the lag that counts as "changing" in a transition
_NOISE_FACTOR = 1.5  # ... or this many times the median recent change over the lag, if higher
# A run also ends when the change over the lag has stayed within _STEADY of itself for
# _SETTLE_FRAMES frames at under _SETTLED_SHARE of the run's peak.
_SETTLE_FRAMES = 4
_SETTLED_SHARE = 0.5
_STEADY = 0.3


def signature(frame: av.VideoFrame) -> Signature:
    """The frame's Y, U and V planes as ``GRID_H`` x ``GRID_W`` cell means each."""
    if frame.format.name not in _PLANAR_8BIT:
        frame = frame.reformat(width=GRID_W * 4, height=GRID_H * 4, format="yuv444p")
    cells = [_cells(plane) for plane in frame.planes[:3]]
    return np.stack(cells).astype(np.float32)


def _cells(plane: av.video.plane.VideoPlane) -> npt.NDArray[np.float32]:
    """A plane's pixels averaged into the grid: a strided pick of about 4 x 4 pixels per cell
    (enough against noise; reading the whole plane would cost a millisecond at 1080p), then
    two small matrix products that average the picks of each cell."""
    rows = np.frombuffer(memoryview(plane), dtype=np.uint8).reshape(plane.height, plane.line_size)
    step_y = max(1, plane.height // (GRID_H * 4))
    step_x = max(1, plane.width // (GRID_W * 4))
    picked = rows[::step_y, : plane.width : step_x].astype(np.float32)
    down, across = _averaging(picked.shape[0], picked.shape[1])
    return np.asarray(down @ picked @ across, dtype=np.float32)


@functools.lru_cache(maxsize=16)
def _averaging(height: int, width: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Matrices that average ``height`` rows into ``GRID_H`` and ``width`` columns into
    ``GRID_W`` (each output cell the mean of the inputs whose centre falls in it; a plane
    smaller than the grid repeats its pixels)."""
    return _bins(height, GRID_H), _bins(width, GRID_W).T


def _bins(size: int, cells: int) -> npt.NDArray[np.float32]:
    owner = np.minimum((np.arange(size) + 0.5) * cells / size, cells - 1).astype(int)
    matrix = np.zeros((cells, size), dtype=np.float32)
    matrix[owner, np.arange(size)] = 1.0
    empty = matrix.sum(axis=1) == 0
    if empty.any():  # fewer inputs than cells: each empty cell takes its nearest input
        nearest = np.minimum((np.arange(cells) + 0.5) * size / cells, size - 1).astype(int)
        matrix[empty, nearest[empty]] = 1.0
    matrix /= matrix.sum(axis=1, keepdims=True)
    return matrix


def change(a: Signature, b: Signature) -> float:
    """How different two frames look, 0-255."""
    return float(np.abs(a - b).mean())


def coarse(sig: Signature) -> Signature:
    """The signature averaged into 8 x 6 regions: what a pan or a moving object barely
    changes, and a dissolve or a fade changes all over."""
    grid = sig.reshape(3, 6, GRID_H // 6, 8, GRID_W // 8).mean(axis=(2, 4))
    return np.asarray(grid, dtype=np.float32)


def repeats(a: Signature, b: Signature, max_change: float) -> bool:
    """Whether two samples show the same picture: no cell of any plane differs by more than
    ``max_change`` levels. Stricter than a 64-bit perceptual hash on purpose: a caption that
    appears in one corner changes a few cells a lot and the hash hardly at all."""
    return float(np.abs(a - b).max()) <= max_change


@dataclass(frozen=True)
class ShotSettings:
    cut_change: float = 20.0
    cut_ratio: float = 3.0
    gradual_change: float = 12.0
    max_transition_s: float = 4.0
    min_shot_s: float = 0.4
    # Gradual transitions compare each frame with the one this long before it: a dissolve's
    # change builds up over the lag while encoding noise does not.
    lag_s: float = 0.2


@dataclass
class _Run:
    """A run of changing frames that may be a gradual transition: the coarse signatures from
    the still frame it is measured from to the latest frame still changing."""

    noise: float  # the change over the lag that counted as still when it began
    frames: list[tuple[float, Signature]]
    changes: list[float] = field(default_factory=list)  # over the lag, frame by frame

    def settled(self, lagged: float) -> bool:
        """Whether the picture is still again, or moving steadily at well under the run's
        peak change (a transition into a moving shot: the motion goes on, the change ends)."""
        if lagged < self.noise:
            return True
        recent = [*self.changes[-(_SETTLE_FRAMES - 1) :], lagged]
        if len(recent) < _SETTLE_FRAMES or max(recent) >= _SETTLED_SHARE * max(self.changes):
            return False
        return max(recent) - min(recent) <= _STEADY * max(recent)

    @property
    def start_t(self) -> float:
        return self.frames[0][0]


class ShotDetector:
    """Feed it every decoded frame in order; it answers the boundary each frame confirms."""

    def __init__(self, settings: ShotSettings | None = None) -> None:
        self._settings = settings or ShotSettings()
        # The frames within the lag: time, signature, coarse signature.
        self._recent: deque[tuple[float, Signature, Signature]] = deque()
        self._steps: deque[float] = deque(maxlen=_HISTORY)  # frame-to-frame changes
        self._lagged: deque[float] = deque(maxlen=_HISTORY)  # changes over the lag
        self._suspect: float | None = None  # the time of a frame that may start a new shot
        self._run: _Run | None = None
        self._latest_boundary = -np.inf

    def feed(self, t: float, sig: Signature) -> ShotBoundary | None:
        """The boundary that frame ``t`` confirms, if any."""
        found: ShotBoundary | None = None
        small = coarse(sig)
        if self._recent:
            found = self._cut(t, sig)
            if found is None and self._suspect is None:
                found = self._gradual(t, small)
        self._remember(t, sig, small)
        if found is None or found.timestamp_s - self._latest_boundary < self._settings.min_shot_s:
            return None
        self._latest_boundary = found.timestamp_s
        return found

    def _cut(self, t: float, sig: Signature) -> ShotBoundary | None:
        """Settle a suspected cut one frame later, or suspect this frame."""
        settings = self._settings
        step = change(self._recent[-1][1], sig)
        if self._suspect is not None:
            cut_t, self._suspect = self._suspect, None
            if len(self._recent) < 2:
                return None
            across = change(self._recent[-2][1], sig)
            if across < settings.cut_change:
                del self._recent[-1]  # a flash: this frame looks like the one before it
                return None
            # The new shot is measured from its own first frame on.
            self._recent = deque([self._recent[-1]])
            self._run = None
            self._lagged.clear()
            return _boundary(cut_t, "cut", across, cut_t, cut_t)
        typical = statistics.fmean(self._steps) if self._steps else 0.0
        if step >= settings.cut_change and step >= settings.cut_ratio * typical:
            self._suspect = t
        else:
            self._steps.append(step)
        return None

    def _gradual(self, t: float, small: Signature) -> ShotBoundary | None:
        """Twin comparison over the lag: a run of changing frames that ends, still again, far
        from where it started."""
        settings = self._settings
        ref_t, _, ref_small = self._recent[0]
        if t - ref_t < settings.lag_s * 0.5:  # not enough history yet
            return None
        lagged = change(ref_small, small)
        noise = max(_NOISE_FLOOR, _NOISE_FACTOR * statistics.median(self._lagged or [0.0]))
        self._lagged.append(lagged)
        run = self._run
        if run is not None and t - run.start_t > settings.max_transition_s:
            run = self._run = None  # motion, not a transition
        if run is None:
            if lagged >= noise and len(self._lagged) > _HISTORY // 2:
                older = [(t_, s_) for t_, _, s_ in self._recent]
                self._run = _Run(noise, [*older, (t, small)], [lagged])
            return None
        if not run.settled(lagged):
            run.frames.append((t, small))
            run.changes.append(lagged)
            return None
        self._run = None
        return _transition(run.frames, small, settings.gradual_change)

    def _remember(self, t: float, sig: Signature, small: Signature) -> None:
        self._recent.append((t, sig, small))
        while len(self._recent) > 2 and t - self._recent[1][0] >= self._settings.lag_s:
            self._recent.popleft()


def _transition(
    frames: list[tuple[float, Signature]], end: Signature, least: float
) -> ShotBoundary | None:
    """Where in a run of changing frames the picture went from its first state to ``end``:
    each frame's progress is its projection on the line between the two; the transition runs
    from 10 % to 90 % of the way, its middle is where half the way is done. (A pan that ends
    in a dissolve moves across that line, not along it, so the middle is the dissolve's.)"""
    start = frames[0][1]
    direction = (end - start).ravel()
    total = float(np.abs(direction).mean())
    if total < least:
        return None
    norm = float(direction @ direction)
    times = [t for t, _ in frames]
    progress = [float((small - start).ravel() @ direction) / norm for _, small in frames]

    def reached(share: float) -> float:
        pairs = zip(times, progress, strict=True)
        return next((t for t, done in pairs if done >= share), times[-1])

    begins, middle, ends = reached(0.1), reached(0.5), reached(0.9)
    if begins == ends:  # no frame in between: a cut too faint for the cut test (navy to black)
        return _boundary(middle, "cut", total, middle, middle)
    return _boundary(middle, "gradual", total, begins, ends)


def _boundary(t: float, kind: str, amount: float, start: float, end: float) -> ShotBoundary:
    """Rounded as JSON keeps it, so a boundary read back from a checkpoint is the same."""
    return ShotBoundary(round(t, 4), kind, round(amount, 2), round(start, 4), round(end, 4))
