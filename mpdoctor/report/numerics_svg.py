"""The numerics per-layer chart of the HTML report, drawn server-side as an inline SVG (no script).

Input: the numerics table of one traced model (mpdoctor.facts.schema.NumericsTable: per layer max |x| in both dtypes,
finiteness and relative error). Two
panels share the layer axis, both log10: max |x| in the compute dtype and in the reference dtype (with the float16
largest finite value as a line), and the relative error against the reference. A layer whose output is not finite
is marked with a red cross above the first panel; missing values leave a gap.
"""

from __future__ import annotations

import math
from html import escape

from mpdoctor.facts.dtypes import FLOAT16_MAX
from mpdoctor.facts.schema import NumericsTable

PANEL_H, GAP, LEFT, RIGHT, TOP, STEP, MIN_WIDTH = 150, 46, 64, 16, 26, 9, 520
COMPUTED, REFERENCE, ERROR, NONFINITE = "#d9480f", "#1c7ed6", "#7048e8", "#c92a2a"


def numerics_svg(numerics: NumericsTable) -> str | None:
    layers = numerics.layers
    if not layers:
        return None
    width = max(MIN_WIDTH, LEFT + RIGHT + len(layers) * STEP + STEP)
    height = TOP + 2 * PANEL_H + GAP + 40
    dtype, reference = numerics.dtype or "compute dtype", numerics.reference_dtype or "reference"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="numerics-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">'
    ]
    magnitudes = [v for layer in layers for v in (layer.max_abs, layer.max_abs_reference) if _positive(v)]
    if numerics.dtype == "float16":
        magnitudes.append(FLOAT16_MAX)
    top = _Panel(TOP, magnitudes, f"max |x| ({dtype} vs {reference})")
    errors = [layer.relative_error for layer in layers if _positive(layer.relative_error)]
    bottom = _Panel(TOP + PANEL_H + GAP, errors, f"relative error of {dtype} vs {reference}")
    parts += top.frame(width) + bottom.frame(width)
    if numerics.dtype == "float16":
        y = top.y(FLOAT16_MAX)
        parts.append(
            f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{NONFINITE}" '
            f'stroke-dasharray="4 3"><title>float16 max 65504</title></line>'
        )
    parts += top.series(layers, "max_abs", COMPUTED, dtype)
    parts += top.series(layers, "max_abs_reference", REFERENCE, reference, hollow=True)  # on top, still visible
    parts += bottom.series(layers, "relative_error", ERROR, "relative error")
    for index, layer in enumerate(layers):
        if layer.finite is False or layer.finite_reference is False:
            x = _x(index)
            which = dtype if layer.finite is False else reference
            parts.append(
                f'<g class="nonfinite"><title>{escape(str(layer.name))}: not finite in '
                f'{escape(str(which))}</title><path d="M{x - 4:.0f},{TOP - 14}l8,8m0,-8l-8,8" '
                f'stroke="{NONFINITE}" stroke-width="2"/></g>'
            )
    legend_y = height - 10
    for i, (label, colour) in enumerate(((dtype, COMPUTED), (reference, REFERENCE), ("relative error", ERROR))):
        x = LEFT + i * 150
        parts.append(
            f'<rect x="{x}" y="{legend_y - 9}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{legend_y}" class="axis">{escape(str(label))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _x(index: int) -> float:
    return LEFT + STEP + index * STEP


class _Panel:
    """One log10 panel: decades from the data's smallest to its largest positive value."""

    def __init__(self, y0: float, values: list[float], title: str) -> None:
        self.y0, self.title = y0, title
        self.low = math.floor(math.log10(min(values))) if values else -1
        self.high = math.ceil(math.log10(max(values))) if values else 1
        if self.high <= self.low:
            self.high = self.low + 1

    def y(self, value: float) -> float:
        fraction = (math.log10(value) - self.low) / (self.high - self.low)
        return self.y0 + PANEL_H - fraction * PANEL_H

    def frame(self, width: float) -> list[str]:
        parts = [
            f'<text x="{LEFT}" y="{self.y0 - 6}" class="axis title">{escape(self.title)} (log scale)</text>',
            f'<rect x="{LEFT}" y="{self.y0}" width="{width - LEFT - RIGHT}" height="{PANEL_H}" fill="none" '
            f'stroke="#d0d7de"/>',
        ]
        step = max(1, math.ceil((self.high - self.low) / 6))
        for decade in range(self.high, self.low - 1, -step):
            y = self.y(10.0**decade)
            parts.append(
                f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
                f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="axis">1e{decade}</text>'
            )
        return parts

    def series(self, layers: list[dict], key: str, colour: str, label: str, hollow: bool = False) -> list[str]:
        parts, run = [], []
        for index, layer in enumerate(layers):
            value = getattr(layer, key)
            if not _positive(value):
                parts += self._line(run, colour, hollow)
                run = []
                continue
            x, y = _x(index), self.y(value)
            run.append((x, y))
            paint = f'fill="none" stroke="{colour}"' if hollow else f'fill="{colour}"'
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{3.5 if hollow else 2.5}" {paint} class="point">'
                f"<title>{escape(str(layer.name))} ({escape(str(layer.class_name))}): "
                f"{escape(label)} {value:.3g}</title></circle>"
            )
        return parts + self._line(run, colour, hollow)

    @staticmethod
    def _line(run: list[tuple[float, float]], colour: str, dashed: bool) -> list[str]:
        if len(run) < 2:
            return []
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
        dash = ' stroke-dasharray="3 2"' if dashed else ""
        return [f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.2" opacity="0.8"{dash}/>']
