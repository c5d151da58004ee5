"""Sending a chart into the conversation: numbers checked, drawn as a PNG, posted as an image."""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

from connectors.base import ToolError, action

from .chart_render import ChartKind, ChartSpec, Label, render_png
from .common import stable_id
from .outbound import Cell, OutboundTools, Table, compact_schema, current_conversation, size_text

MAX_SERIES = 12  # more lines or bar groups than this cannot be told apart
MAX_PIE_SLICES = 30
# Strict: "12" is text, not a number; a chart of guessed numbers would mislead.
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]


class Series(BaseModel):
    """One line, one set of bars or points: a value for each label, in order."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=compact_schema)

    name: str = Field(default="", max_length=100)
    values: list[Number | None] = Field(min_length=1)


class ChartTools(OutboundTools):
    # No chat id argument: the run decides where the chart goes (see .outbound).
    @action(side_effect="write", timeout=90.0)
    async def feishu_send_chart(
        self,
        title: Annotated[str, Field(min_length=1, max_length=200)],
        kind: ChartKind = "bar",
        labels: list[Label] | None = None,
        series: Annotated[list[Series] | None, Field(min_length=1, max_length=MAX_SERIES)] = None,
        table: Table | None = None,
        x: str | None = None,
        y: Annotated[list[str] | None, Field(min_length=1, max_length=MAX_SERIES)] = None,
        x_label: Annotated[str | None, Field(max_length=100)] = None,
        y_label: Annotated[str | None, Field(max_length=100)] = None,
    ) -> str:
        """Draw a chart and send it as an image into the current conversation (as a reply to
        the person's message). Give labels and series, or a table (e.g. a tool's result) with
        the x column and the y columns to plot. It goes only to this conversation.

        Args:
            title: The chart's title.
            kind: "bar", "barh" (horizontal bars), "line", "pie" (one series) or "scatter".
            labels: The x values or categories, in order, e.g. ["Jan", "Feb", "Mar"].
            series: [{"name": "Sales", "values": [1.5, 2, null]}, ...]: a number or null per label.
            table: Instead of labels and series: {"columns": [...], "rows": [[...], ...]}.
            x: With table: the column of labels (default: the first).
            y: With table: the columns of numbers to plot (default: the others).
            x_label: The x axis title (default with table: the x column).
            y_label: The y axis title.
        """
        if table is not None:
            if labels is not None or series is not None:
                raise ToolError("pass either table, or labels and series, not both")
            spec = spec_from_table(title, kind, table, x, y, x_label, y_label)
        elif labels is not None and series is not None:
            pairs = [(s.name, s.values) for s in series]
            spec = ChartSpec(title, kind, labels, pairs, x_label or "", y_label or "")
        else:
            raise ToolError("pass labels and series (or a table) to chart")
        check_spec(spec, self.settings.chart_max_points)
        where = current_conversation("feishu_send_chart")
        self._client()  # unconfigured: say so before drawing
        png = await asyncio.to_thread(render_png, spec)
        self._check_size(len(png.data), "The chart")
        key = await self._upload_image(png.data)
        # The same chart for the same message is posted once, even when a run is retried.
        uuid = stable_id("chart", where.message_id, spec.title, spec.kind, spec.labels, spec.series)
        await self._post(where, "image", {"image_key": key}, uuid)
        size = f"{png.width}×{png.height} PNG, {size_text(len(png.data))}"
        return f'Sent the {kind} chart "{title}" ({size}) to the conversation.'


def spec_from_table(
    title: str,
    kind: ChartKind,
    table: Table,
    x: str | None,
    y: list[str] | None,
    x_label: str | None,
    y_label: str | None,
) -> ChartSpec:
    """The chart of ``table``'s ``y`` columns against its ``x`` column."""
    columns = table.columns
    x = x or columns[0]
    missing = [name for name in [x, *(y or [])] if name not in columns]
    if missing:
        raise ToolError(f"no column {missing[0]!r} in the table; its columns: {columns}")
    y = y or [name for name in columns if name != x]
    if not y:
        raise ToolError("the table has no column to plot besides x: name the y columns")
    if len(y) > MAX_SERIES:
        raise ToolError(f"at most {MAX_SERIES} y columns can be drawn; pick some with y")
    at = columns.index(x)
    labels = [_label(row[at]) for row in table.rows]
    series = [(name, _numbers(table, name)) for name in y]
    single = y_label or (y[0] if len(y) == 1 else "")
    return ChartSpec(title, kind, labels, series, x_label or x, single)


def _label(cell: Cell) -> Label:
    if cell is None:
        return ""
    return str(cell) if isinstance(cell, str | bool) else cell


def _numbers(table: Table, column: str) -> list[float | None]:
    at = table.columns.index(column)
    values: list[float | None] = []
    for number, row in enumerate(table.rows, start=1):
        cell = row[at]
        if cell is not None and (isinstance(cell, bool | str) or cell != cell):
            raise ToolError(
                f"column {column!r} holds {cell!r} in row {number}, which is not a number: "
                "only columns of numbers can be plotted (null leaves a gap)"
            )
        values.append(None if cell is None else float(cell))
    return values


def check_spec(spec: ChartSpec, max_points: int) -> None:
    """Refuse what cannot be drawn truthfully, saying what to change."""
    count = len(spec.labels)
    if count == 0:
        raise ToolError("there is nothing to chart: no labels (or no table rows)")
    for name, values in spec.series:
        if len(values) != count:
            raise ToolError(
                f"series {name or '(unnamed)'!r} has {len(values)} values but there are "
                f"{count} labels: give one value per label"
            )
    points = count * len(spec.series)
    if points > max_points:
        raise ToolError(
            f"the chart would have {points} points, over the limit of {max_points}: "
            "aggregate first (e.g. by week or by category)"
        )
    if all(value is None for _, values in spec.series for value in values):
        raise ToolError("every value is null: there is nothing to draw")
    if spec.kind == "pie":
        _check_pie(spec)


def _check_pie(spec: ChartSpec) -> None:
    if len(spec.series) != 1:
        raise ToolError('a pie chart shows one series; use kind "bar" to compare several')
    if len(spec.labels) > MAX_PIE_SLICES:
        raise ToolError(f"a pie chart of over {MAX_PIE_SLICES} slices cannot be read; use a bar")
    values = spec.series[0][1]
    if any(value is None or value < 0 for value in values):
        raise ToolError("a pie chart needs a value of zero or more for every slice")
    if not sum(value or 0.0 for value in values) > 0:
        raise ToolError("a pie chart needs values that add up to more than zero")


__all__ = ["ChartTools", "Series", "check_spec", "spec_from_table"]
