"""A chart as PNG bytes, drawn with matplotlib's Agg renderer: no display, no network.

matplotlib takes about a second to import, so it is imported on the first chart, not with
the connector. Rendering runs in a worker thread (the caller's ``asyncio.to_thread``):
each chart is its own ``Figure`` on its own Agg canvas, never pyplot's shared state, so
two charts drawn at once do not draw on each other.
"""

from __future__ import annotations

import io
import math
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis

ChartKind = Literal["bar", "barh", "line", "pie", "scatter"]
Label = str | int | float

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.5, 150  # 1200×675 pixels: sharp in a chat, small to send
# More category labels than fit overlap: every n-th is shown. Along x, slanted labels
# take room by their length; down the y axis (barh), by the line height.
_MAX_X_TICKS, _X_TICK_CHARS, _MAX_Y_TICKS = 30, 160, 20
_TICK_CHARS = 24  # a longer label is cut, or it would squeeze the plot itself
# Fonts that show Chinese, best first; the first one installed leads the font list, and
# matplotlib falls back glyph by glyph to the next (DejaVu Sans) for what it lacks.
_CJK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Sarasa Gothic SC",
    "PingFang SC",
    "Microsoft YaHei",
    "SimHei",
    "Droid Sans Fallback",
    "AR PL UMing CN",
)
_setup_lock = threading.Lock()
_set_up = False


@dataclass(frozen=True, slots=True)
class ChartSpec:
    """A checked chart: one value (or None, a gap) per label in every series."""

    title: str
    kind: ChartKind
    labels: list[Label]
    series: list[tuple[str, list[float | None]]]
    x_label: str = ""
    y_label: str = ""


@dataclass(frozen=True, slots=True)
class Png:
    data: bytes
    width: int
    height: int


def render_png(spec: ChartSpec) -> Png:
    """Draw ``spec``; blocking (a worker thread's job)."""
    _set_up_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    canvas = FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    if spec.kind == "pie":
        _pie(axes, spec)
    elif spec.kind in ("bar", "barh"):
        _bars(axes, spec, horizontal=spec.kind == "barh")
    else:
        _points(axes, spec)
    axes.set_title(spec.title)
    if spec.kind != "pie":
        _axis_titles(axes, spec)
        if len(spec.series) > 1:
            axes.legend()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    width, height = canvas.get_width_height()
    return Png(out.getvalue(), width, height)


def _set_up_matplotlib() -> None:
    # Without a Chinese font, Chinese shows as boxes: a worse chart, not a failure, and a
    # warning per glyph would only fill the logs. Set on every chart, as a test runner
    # resets the filters; adding the same filter again replaces it.
    warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
    global _set_up
    with _setup_lock:
        if not _set_up:
            _configure_matplotlib()
            _set_up = True


def _configure_matplotlib() -> None:
    import matplotlib

    # Never a GUI backend in a server, whatever MPLBACKEND says (the figures here draw
    # on their own Agg canvas anyway).
    matplotlib.use("Agg")
    from matplotlib import font_manager, rcParams

    installed = {font.name for font in font_manager.fontManager.ttflist}
    chinese = [name for name in _CJK_FONTS if name in installed]
    chinese += sorted(n for n in installed if "CJK" in n and n not in chinese)
    rcParams["font.family"] = "sans-serif"
    rcParams["font.sans-serif"] = [*chinese, *rcParams["font.sans-serif"]]
    rcParams["axes.unicode_minus"] = False  # CJK fonts often lack U+2212, the minus


def _values(values: Sequence[float | None]) -> list[float]:
    return [math.nan if value is None else value for value in values]


def _bars(axes: Axes, spec: ChartSpec, *, horizontal: bool) -> None:
    # Grouped bars: each series gets an equal slice of the 0.8 a category is wide.
    width = 0.8 / len(spec.series)
    positions = list(range(len(spec.labels)))
    for index, (name, values) in enumerate(spec.series):
        offsets = [p - 0.4 + width * (index + 0.5) for p in positions]
        if horizontal:
            axes.barh(offsets, _values(values), height=width, label=name or None)
        else:
            axes.bar(offsets, _values(values), width=width, label=name or None)
    if horizontal:
        _categories(axes.yaxis, spec.labels, vertical=True)
        axes.invert_yaxis()  # the first label on top, as it reads
        axes.grid(axis="x", alpha=0.3)
    else:
        _categories(axes.xaxis, spec.labels, vertical=False)
        axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)


def _points(axes: Axes, spec: ChartSpec) -> None:
    """Line and scatter: numbers as labels make a numeric x axis, anything else categories."""
    numeric = all(isinstance(label, int | float) for label in spec.labels)
    xs = [float(label) for label in spec.labels] if numeric else list(range(len(spec.labels)))
    for name, values in spec.series:
        if spec.kind == "line":
            marker = "o" if len(xs) <= 40 else None
            axes.plot(xs, _values(values), marker=marker, markersize=4, label=name or None)
        else:
            axes.scatter(xs, _values(values), s=18, label=name or None)
    if not numeric:
        _categories(axes.xaxis, spec.labels, vertical=False)
    axes.grid(alpha=0.3)


def _pie(axes: Axes, spec: ChartSpec) -> None:
    (_, values), labels = spec.series[0], [str(label) for label in spec.labels]
    percent = "%1.1f%%" if len(labels) <= 12 else ""  # small slices' numbers would collide
    axes.pie(_values(values), labels=labels, autopct=percent, startangle=90, counterclock=False)
    axes.set_aspect("equal")


def _categories(axis: Axis, labels: Sequence[Label], *, vertical: bool) -> None:
    texts = [_cut(str(label)) for label in labels]
    longest = max(len(text) for text in texts)
    room = _MAX_Y_TICKS if vertical else min(_MAX_X_TICKS, max(6, _X_TICK_CHARS // longest))
    step = max(1, math.ceil(len(labels) / room))
    axis.set_ticks(range(0, len(labels), step), texts[::step])
    if not vertical and (len(labels) > 8 or longest > 10):
        for tick in axis.get_ticklabels():
            tick.set_rotation(40)
            tick.set_horizontalalignment("right")


def _cut(text: str) -> str:
    return text if len(text) <= _TICK_CHARS else text[: _TICK_CHARS - 1] + "…"


def _axis_titles(axes: Axes, spec: ChartSpec) -> None:
    # A single named series names what the values are, when nothing else does.
    y_label = spec.y_label or (spec.series[0][0] if len(spec.series) == 1 else "")
    x_title, y_title = (y_label, spec.x_label) if spec.kind == "barh" else (spec.x_label, y_label)
    if x_title:
        axes.set_xlabel(x_title)
    if y_title:
        axes.set_ylabel(y_title)


__all__ = ["ChartKind", "ChartSpec", "Label", "Png", "render_png"]
