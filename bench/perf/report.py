"""The pipeline benchmark's picture and tables: a PNG timeline (Pillow) and a markdown summary.

The timeline has one panel per mode: a lane per worker (thread, Ray Data actor, Serve
replica) with a bar for every stretch of stage work, and the machine's CPU busy fraction
underneath. A pipeline that keeps its bottleneck fed shows full lanes and a flat CPU line;
one that waits shows a sawtooth.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image, ImageDraw, ImageFont

from core.stage_names import ALL

if TYPE_CHECKING:
    from bench.perf.modes.common import ModeResult
    from bench.perf.sampler import TreeSampler

WIDTH = 1600
LEFT = 190
RIGHT = 30
LANE_H = 16
CPU_H = 60
COLORS = {
    "fetch": (150, 150, 150),
    "decode": (66, 133, 244),
    "ocr": (234, 67, 53),
    "vlm": (155, 89, 182),
    "embed": (52, 168, 83),
    "speech": (244, 180, 0),
}


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # an old Pillow without sized default fonts
        return ImageFont.load_default()


def _panels(runs: dict[str, tuple[ModeResult, TreeSampler]], report: dict[str, Any]) -> list[str]:
    """Modes worth a panel: the baselines, the best Ray Data setting, every streaming run."""
    names: list[str] = [n for n in ("sequential", "sequential_defaults") if n in runs]
    if report.get("best_raydata"):
        names.append(report["best_raydata"])
    names += [n for n in runs if n.startswith("streaming")]
    return [n for n in names if not runs[n][0].error]


def write_timeline(
    path: Path, runs: dict[str, tuple[ModeResult, TreeSampler]], report: dict[str, Any]
) -> None:
    names = _panels(runs, report)
    layouts = []
    span = 1.0
    for name in names:
        result, _ = runs[name]
        lanes = sorted(
            {a.lane for a in result.timeline},
            key=lambda lane: (_order(lane, result), lane),
        )
        layouts.append((name, lanes))
        span = max(span, result.window_end - result.window_start)
    height = 40 + sum(60 + len(lanes) * LANE_H + CPU_H for _, lanes in layouts) + 30
    image = Image.new("RGB", (WIDTH, max(height, 120)), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    title, small = _font(16), _font(11)
    draw.text(
        (10, 8),
        "Stage activity per worker (bars) and machine CPU busy (line)",
        fill=(0, 0, 0),
        font=title,
    )
    x_scale = (WIDTH - LEFT - RIGHT) / span
    y = 40
    for name, lanes in layouts:
        result, sampler = runs[name]
        origin = result.window_start
        summary = report["modes"].get(name, {})
        label = (
            f"{name}: {summary.get('videos_per_min', 0):.1f} videos/min, "
            f"efficiency {summary.get('efficiency', 0):.2f}, "
            f"CPU busy {summary.get('cpu_busy_fraction', 0):.2f}"
        )
        draw.text((10, y), label, fill=(0, 0, 0), font=title)
        y += 24
        rows = {lane: y + i * LANE_H for i, lane in enumerate(lanes)}
        for lane, top in rows.items():
            draw.text((10, top + 2), lane[:28], fill=(60, 60, 60), font=small)
            draw.line(
                [(LEFT, top + LANE_H - 1), (WIDTH - RIGHT, top + LANE_H - 1)], fill=(235, 235, 235)
            )
        for act in result.timeline:
            if act.end < origin or act.start > origin + span:
                continue
            x0 = LEFT + max(0.0, act.start - origin) * x_scale
            x1 = LEFT + min(span, act.end - origin) * x_scale
            top = rows[act.lane]
            color = COLORS.get(act.stage, (120, 120, 120))
            draw.rectangle([x0, top + 2, max(x0 + 1, x1), top + LANE_H - 3], fill=color)
        y += len(lanes) * LANE_H + 4
        _cpu_line(draw, sampler, origin, span, x_scale, y, small)
        y += CPU_H + 8
        _axis(draw, span, x_scale, y, small)
        y += 24
    _legend(draw, small, height - 24)
    image.save(path)


def _order(lane: str, result: ModeResult) -> int:
    stages = [a.stage for a in result.timeline if a.lane == lane]
    return min((ALL.index(s) for s in stages if s in ALL), default=99)


def _cpu_line(
    draw: ImageDraw.ImageDraw,
    sampler: TreeSampler,
    origin: float,
    span: float,
    x_scale: float,
    top: int,
    font: Any,
) -> None:
    draw.rectangle([LEFT, top, WIDTH - RIGHT, top + CPU_H], outline=(200, 200, 200))
    draw.text((10, top + CPU_H // 2 - 6), "machine CPU busy", fill=(60, 60, 60), font=font)
    points = [
        (LEFT + (s.t - origin) * x_scale, top + CPU_H - s.machine_busy * CPU_H)
        for s in sampler.samples
        if origin <= s.t <= origin + span
    ]
    if len(points) > 1:
        draw.line(points, fill=(20, 20, 20), width=2)


def _axis(draw: ImageDraw.ImageDraw, span: float, x_scale: float, top: int, font: Any) -> None:
    step = next(s for s in (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1e9) if span / s <= 20)
    t = 0.0
    while t <= span:
        x = LEFT + t * x_scale
        draw.line([(x, top), (x, top + 4)], fill=(0, 0, 0))
        draw.text((x - 6, top + 6), f"{t:g}s", fill=(0, 0, 0), font=font)
        t += step


def _legend(draw: ImageDraw.ImageDraw, font: Any, top: int) -> None:
    x = LEFT
    for stage, color in COLORS.items():
        draw.rectangle([x, top + 2, x + 14, top + 12], fill=color)
        draw.text((x + 18, top), stage, fill=(0, 0, 0), font=font)
        x += 90


# -- markdown ----------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def write_markdown(path: Path, report: dict[str, Any]) -> None:
    inputs, bound = report.get("inputs", {}), report.get("bound", {})
    lines = [
        "# Pipeline benchmark",
        "",
        f"{inputs.get('videos')} videos of {inputs.get('seconds')} s at {inputs.get('size')} "
        f"(grain {inputs.get('grain')}{', talking throughout' if inputs.get('speech') else ''}), "
        f"{inputs.get('sample_fps')} frame/s sampled ({inputs.get('sample_mode', 'fps')}"
        f"{', unreferenced frames not decoded' if inputs.get('skip_nonref_frames') else ''}), "
        "OCR detector "
        f"limit {inputs.get('ocr_det_limit_side')} px, {inputs.get('chunk_frames')} frames per "
        f"chunk; {report.get('machine', {}).get('cores')} cores, load average at start "
        f"{_cell(report.get('machine', {}).get('loadavg_at_start', [None])[0])}.",
        "",
        f"Bound: {_bound_line(bound)}; stage costs measured in {bound.get('measured_in')} "
        f"(every core busy with stage work) ({bound.get('formula')}).",
        "",
        f"Bound alone: {_bound_line(report.get('bound_alone', {}))}; stage costs measured in "
        f"{report.get('bound_alone', {}).get('measured_in')} (the other cores idle).",
        "",
        "| mode | videos/min | frames/s | efficiency | vs bound alone | p50 s | p95 s "
        "| first result s | CPU busy | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report.get("modes", {}).items():
        if "error" in s:
            lines.append(f"| {name} | failed | | | | | | | | |")
            continue
        lines.append(
            "| "
            + " | ".join(
                [name]
                + [
                    _cell(s.get(k))
                    for k in (
                        "videos_per_min",
                        "frames_per_s",
                        "efficiency",
                        "efficiency_vs_bound_alone",
                        "latency_p50_s",
                        "latency_p95_s",
                        "first_result_latency_s",
                        "cpu_busy_fraction",
                        "peak_rss_mb",
                    )
                ]
            )
            + " |"
        )
    lines += _breakdown_table(report)
    lines += ["", "| ratio | value | target | met |", "|---|---|---|---|"]
    for name, check in report.get("acceptance", {}).items():
        value, target, met = (_cell(check[k]) for k in ("value", "target", "met"))
        lines.append(f"| {name} | {value} | {target} | {met} |")
    settings = [(n, s) for n, s in report.get("modes", {}).items() if n.startswith("raydata")]
    if settings:
        lines += [
            "",
            "Ray Data settings tried:",
            "",
            "| setting | knobs | videos/min |",
            "|---|---|---|",
        ]
        for name, s in settings:
            knobs = ", ".join(f"{k}={v}" for k, v in s.get("setting", {}).items())
            lines.append(f"| {name} | {knobs} | {_cell(s.get('videos_per_min'))} |")
    if "memory" in report:
        lines += ["", "Memory (peak RSS of the whole process tree, MB):", ""]
        lines += [f"- {k}: {_cell(v)}" for k, v in report["memory"].items()]
    if "low_load" in report:
        low = report["low_load"]
        lines += [
            "",
            f"Low load: one video alone done in {_cell(low['latency_s'])} s "
            f"({_cell(low['ratio'])}x its isolated time of {_cell(low['isolated_s'])} s).",
        ]
    path.write_text("\n".join(lines) + "\n")


def _bound_line(bound: dict[str, Any]) -> str:
    stages = ", ".join(f"{k} {v}" for k, v in bound.get("cpu_s_per_video", {}).items())
    return (
        f"{bound.get('total_cpu_s_per_video')} CPU-s per video ({stages}) -> "
        f"{bound.get('videos_per_min')} videos/min"
    )


def _breakdown_table(report: dict[str, Any]) -> list[str]:
    """Where the efficiency went, per mode whose stage CPU is known."""
    rows = [(n, s) for n, s in report.get("modes", {}).items() if "cpu_breakdown" in s]
    if not rows:
        return []
    lines = [
        "",
        "Where the efficiency went (efficiency = at run cost / stage cost vs bound; host "
        "scaling: what a busy core is worth with every core busy, measured before the mode):",
        "",
        "| mode | efficiency | stage CPU-s/video | stage cost vs bound | efficiency at run cost "
        "| non-stage CPU | CPU busy | host scaling | efficiency in window |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in rows:
        b = s["cpu_breakdown"]
        cells = [
            s.get("efficiency"),
            b["stage_cpu_s_per_video"],
            b["stage_cost_vs_bound"],
            b["efficiency_at_run_cost"],
            b["non_stage_cpu_fraction"],
            s.get("cpu_busy_fraction"),
            s.get("host_parallel_scaling"),
            b.get("efficiency_in_window"),
        ]
        lines.append(f"| {name} | " + " | ".join(_cell(c) for c in cells) + " |")
    for name, s in rows:
        untimed = s["cpu_breakdown"].get("untimed_stages_cpu_s_per_video")
        if untimed:
            stages = ", ".join(f"{k} {v}" for k, v in untimed.items())
            lines.append(
                f"\n{name}: efficiency in window counts {stages} CPU-s per video, which its "
                "replicas do not time: their bound cost times the drift of the timed stages."
            )
    return lines
