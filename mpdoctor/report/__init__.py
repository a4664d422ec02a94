"""Renderers: pure functions `render(report, stream, **options)`; none of them decides exit codes."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TextIO

FORMATS = ("text", "json", "sarif", "github", "junit", "gitlab", "html")


def renderer(name: str) -> Callable[..., None]:
    module = {"json": "json_format"}.get(name, name)
    return importlib.import_module(f"mpdoctor.report.{module}").render


def write_report(report, fmt: str, stream: TextIO, **options) -> None:
    renderer(fmt)(report, stream, **options)
