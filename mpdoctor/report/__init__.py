"""Renderers: pure functions `render(report, stream, **options)`; none of them decides exit codes."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from mpdoctor.diagnostics import Report

FORMATS = ("text", "json", "sarif", "github", "junit", "gitlab", "html")


def renderer(name: str) -> Callable[..., None]:
    module = {"json": "json_format"}.get(name, name)
    render: Callable[..., None] = importlib.import_module(f"mpdoctor.report.{module}").render
    return render


def write_report(report: Report, fmt: str, stream: TextIO, **options: object) -> None:
    renderer(fmt)(report, stream, **options)
