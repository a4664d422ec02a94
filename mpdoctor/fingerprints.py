"""Fingerprints of findings that survive lines added above them: SARIF `partialFingerprints`, GitLab's code quality
fingerprints and the baseline (mpdoctor.baseline) all hash the same material."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import PurePath

from mpdoctor.diagnostics import Diagnostic, SourceText


def posix_path(path: str) -> str:
    """A path as forward-slash text without a leading `./` (what CI systems match against repository files)."""
    return PurePath(path).as_posix()  # also drops a leading "./" and doubled slashes


def fingerprint_materials(
    diagnostics: list[Diagnostic], sources: Mapping[str, SourceText], path_of=posix_path
) -> list[str]:
    """For each diagnostic, the text to hash: code, path (as `path_of` gives it) and the source line with its
    whitespace normalised (or the message when the line is not known). No line (or cell) number, so it survives
    lines added above; identical findings are told apart by their order of occurrence, as GitHub does with its own
    line hashes."""
    seen: dict[str, int] = {}
    materials = []
    for d in diagnostics:
        source = sources.get(d.location.path)
        text = source.line(d.location.line, d.location.cell) if source is not None else None
        text = " ".join(text.split()) if text is not None and text.strip() else None
        key = "\0".join(
            (
                d.code,
                path_of(d.location.path),
                "line" if text is not None else "message",
                text if text is not None else d.message,
            )
        )
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        materials.append(key if occurrence == 0 else f"{key}\0{occurrence}")
    return materials


def fingerprint(material: str) -> str:
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
