"""The numerics per-layer chart of the HTML report, drawn server-side as an inline SVG (no script).

Input: the numerics table of one traced model (mpdoctor.facts.schema.NumericsTable: per layer max |x| in both dtypes,
finiteness and relative error). Two panels share the layer axis, both log10: max |x| in the compute dtype and in the
reference dtype (with the float16 largest finite value as a line), and the relative error against the reference.

The chart takes the width of its panel at any window width: every horizontal coordinate is a percentage of the SVG's
width (no viewBox), so text keeps its size instead of being scaled with the drawing. Layers are labelled on the x
axis (rotated; every k-th name when they would crowd, every name on hover over its column). A layer whose output is
not finite is marked with a red cross in a strip of its own between the panel's title and the panel. A panel with
nothing to draw says why ("relative error not shown: the float16 run is non-finite from layer `x`").
"""

from __future__ import annotations

import math
from html import escape
from typing import TypeGuard

from mpdoctor.facts.dtypes import FLOAT16_MAX
from mpdoctor.facts.schema import NumericsRow, NumericsTable

# Vertical layout in pixels; horizontal in percent of the chart's width.
# LABELS_H: a rotated name of LABEL_CHARS at the axis font (~5.5 px a character) reaches ~125 px down
TITLE_H, MARKS_H, PANEL_H, GAP, LABELS_H, LEGEND_H = 16, 16, 150, 30, 140, 24
LEFT, RIGHT = 9.0, 1.5  # % of the width: the y-axis labels (and the first layer name, leaning left), the right margin
MIN_LABEL_PX, NARROW_PLOT_PX = 14, 640  # labels at least 14 px apart on a plot as narrow as a phone-ish panel
LABEL_CHARS = 28  # batch_normalization_12 whole; longer names end in … (the whole name on hover)
COMPUTED, REFERENCE, ERROR, NONFINITE = "#d9480f", "#1c7ed6", "#7048e8", "#c92a2a"


def numerics_svg(numerics: NumericsTable) -> str | None:
    layers = numerics.layers
    if not layers:
        return None
    dtype, reference = numerics.dtype or "compute dtype", numerics.reference_dtype or "reference"
    top_y = TITLE_H + MARKS_H
    bottom_y = top_y + PANEL_H + GAP + TITLE_H
    labels_y = bottom_y + PANEL_H + 8
    height = labels_y + LABELS_H + LEGEND_H
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="numerics-chart" width="100%" height="{height}" '
        f'role="img" aria-label="max |x| and relative error per layer">'
    ]
    magnitudes = [v for layer in layers for v in (layer.max_abs, layer.max_abs_reference) if _positive(v)]
    if numerics.dtype == "float16" and magnitudes:
        magnitudes.append(FLOAT16_MAX)
    top = _Panel(top_y, magnitudes, f"max |x| ({dtype} vs {reference})", title_y=TITLE_H - 4)
    errors = [layer.relative_error for layer in layers if _positive(layer.relative_error)]
    bottom = _Panel(bottom_y, errors, f"relative error of {dtype} vs {reference}", title_y=bottom_y - 6)
    parts += top.frame() + bottom.frame()
    if numerics.dtype == "float16" and magnitudes:
        y = top.y(FLOAT16_MAX)
        parts.append(
            f'<line x1="{LEFT}%" x2="{100 - RIGHT}%" y1="{y:.1f}" y2="{y:.1f}" stroke="{NONFINITE}" '
            f'stroke-dasharray="4 3"><title>float16 max 65504</title></line>'
        )
    parts += _columns(layers, top_y, bottom_y + PANEL_H)
    parts += top.series(layers, "max_abs", COMPUTED, dtype)
    parts += top.series(layers, "max_abs_reference", REFERENCE, reference, hollow=True)  # on top, still visible
    parts += bottom.series(layers, "relative_error", ERROR, "relative error")
    parts += _nonfinite_marks(layers, dtype, reference)
    if not magnitudes:
        parts.append(top.note("max |x| not measured for any layer"))
    note = _missing_errors(layers, dtype, bool(errors))
    if note:
        parts.append(bottom.note(note, centred=not errors))
    parts += _layer_labels(layers, labels_y)
    legend_y = height - 8
    for i, (label, colour) in enumerate(((dtype, COMPUTED), (reference, REFERENCE), ("relative error", ERROR))):
        x = LEFT + i * 14
        parts.append(
            f'<rect x="{x:.1f}%" y="{legend_y - 9}" width="10" height="10" fill="{colour}"/>'
            f'<svg x="{x:.1f}%" y="{legend_y - 9}" overflow="visible"><text x="14" y="9" class="axis">'
            f"{escape(str(label))}</text></svg>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _positive(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _x(index: int, count: int) -> float:
    """The centre of layer `index`'s column, in percent of the width."""
    return LEFT + (index + 0.5) * (100 - LEFT - RIGHT) / count


def _columns(layers: list[NumericsRow], top: float, bottom: float) -> list[str]:
    """An invisible column per layer: hovering anywhere over it names the layer (also where nothing is drawn)."""
    width = (100 - LEFT - RIGHT) / len(layers)
    return [
        f'<rect class="column" x="{_x(i, len(layers)) - width / 2:.3f}%" y="{top}" width="{width:.3f}%" '
        f'height="{bottom - top}" fill="transparent"><title>{escape(str(layer.name))} '
        f"({escape(str(layer.class_name))})</title></rect>"
        for i, layer in enumerate(layers)
    ]


def _nonfinite_marks(layers: list[NumericsRow], dtype: str, reference: str) -> list[str]:
    """Red crosses in the strip between the top panel's title and the panel: never over the title or the data."""
    y = TITLE_H + 4
    parts = []
    for index, layer in enumerate(layers):
        if layer.finite is False or layer.finite_reference is False:
            which = dtype if layer.finite is False else reference
            parts.append(
                f'<svg class="nonfinite" x="{_x(index, len(layers)):.3f}%" y="{y}" overflow="visible">'
                f"<title>{escape(str(layer.name))}: not finite in {escape(str(which))}</title>"
                f'<path d="M-4,0l8,8m0,-8l-8,8" stroke="{NONFINITE}" stroke-width="2"/></svg>'
            )
    return parts


def _missing_errors(layers: list[NumericsRow], dtype: str, some_shown: bool) -> str | None:
    """Why relative errors are missing, from the first layer whose compute-dtype output is non-finite on."""
    first = next((layer for layer in layers if layer.finite is False), None)
    if first is not None:
        if some_shown:
            return f"no relative error from layer `{first.name}` on: the {dtype} run is non-finite there"
        return f"relative error not shown: the {dtype} run is non-finite from layer `{first.name}`"
    if not some_shown:
        return "relative error not shown: no layer has a nonzero, finite error to plot"
    return None


def _layer_labels(layers: list[NumericsRow], y: float) -> list[str]:
    """Layer names under the bottom panel, rotated; every `step`-th one so that they stay apart on a narrow panel."""
    plot_px = NARROW_PLOT_PX * (100 - LEFT - RIGHT) / 100
    step = max(1, math.ceil(len(layers) * MIN_LABEL_PX / plot_px))
    parts = []
    for index in range(0, len(layers), step):
        name = str(layers[index].name)
        short = name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"
        parts.append(
            f'<svg class="layer-label" x="{_x(index, len(layers)):.3f}%" y="{y}" overflow="visible">'
            f'<text transform="rotate(-55)" text-anchor="end" class="axis"><title>{escape(name)}</title>'
            f"{escape(short)}</text></svg>"
        )
    return parts


class _Panel:
    """One log10 panel: decades from the data's smallest to its largest positive value."""

    def __init__(self, y0: float, values: list[float], title: str, title_y: float) -> None:
        self.y0, self.title, self.title_y = y0, title, title_y
        self.empty = not values
        self.low = math.floor(math.log10(min(values))) if values else -1
        self.high = math.ceil(math.log10(max(values))) if values else 1
        if self.high <= self.low:
            self.high = self.low + 1

    def y(self, value: float) -> float:
        fraction = (math.log10(value) - self.low) / (self.high - self.low)
        return self.y0 + PANEL_H - fraction * PANEL_H

    def frame(self) -> list[str]:
        parts = [
            f'<text x="{LEFT}%" y="{self.title_y}" class="axis title">{escape(self.title)} (log scale)</text>',
            f'<rect x="{LEFT}%" y="{self.y0}" width="{100 - LEFT - RIGHT}%" height="{PANEL_H}" fill="none" '
            f'stroke="#d0d7de"/>',
        ]
        step = max(1, math.ceil((self.high - self.low) / 6))
        decades = [] if self.empty else range(self.high, self.low - 1, -step)  # no scale without data
        for decade in decades:
            y = self.y(10.0**decade)
            parts.append(
                f'<line x1="{LEFT}%" x2="{100 - RIGHT}%" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
                f'<text x="{LEFT - 0.6}%" y="{y + 4:.1f}" text-anchor="end" class="axis">1e{decade}</text>'
            )
        return parts

    def note(self, text: str, centred: bool = True) -> str:
        """A sentence inside the panel saying why (part of) it is empty."""
        x, anchor = ((LEFT + 100 - RIGHT) / 2, "middle") if centred else (LEFT + 1, "start")
        y = self.y0 + PANEL_H / 2 if centred else self.y0 + 14
        return f'<text class="empty-note axis" x="{x:.1f}%" y="{y:.0f}" text-anchor="{anchor}">{escape(text)}</text>'

    def series(self, layers: list[NumericsRow], key: str, colour: str, label: str, hollow: bool = False) -> list[str]:
        parts, previous = [], None
        for index, layer in enumerate(layers):
            value = getattr(layer, key)
            if not _positive(value):
                previous = None  # a gap: the line breaks
                continue
            x, y = _x(index, len(layers)), self.y(value)
            if previous is not None:
                dash = ' stroke-dasharray="3 2"' if hollow else ""
                parts.append(
                    f'<line x1="{previous[0]:.3f}%" y1="{previous[1]:.1f}" x2="{x:.3f}%" y2="{y:.1f}" '
                    f'stroke="{colour}" stroke-width="1.2" opacity="0.8"{dash}/>'
                )
            previous = (x, y)
            paint = f'fill="none" stroke="{colour}"' if hollow else f'fill="{colour}"'
            parts.append(
                f'<circle cx="{x:.3f}%" cy="{y:.1f}" r="{3.5 if hollow else 2.5}" {paint} class="point">'
                f"<title>{escape(str(layer.name))} ({escape(str(layer.class_name))}): "
                f"{escape(label)} {value:.3g}</title></circle>"
            )
        return parts
