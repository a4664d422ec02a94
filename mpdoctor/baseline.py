"""Baselines for the CI gate: `--write-baseline FILE` records today's findings, `--baseline FILE` keeps them from
failing later runs while any new finding still does.

A finding is matched by code, path (relative to the baseline file's directory, so the gate does not depend on the
directory CI runs from) and the SARIF fingerprint material: the source line's content with whitespace normalised,
no line number, plus an occurrence index for identical lines. Lines inserted above a finding keep it matched;
editing the offending line makes it new. Line and message are stored for people reading the file, never matched.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from mpdoctor import reads
from mpdoctor.diagnostics import Diagnostic, SourceText
from mpdoctor.fingerprints import fingerprint, fingerprint_materials
from mpdoctor.writes import write_atomic

VERSION = 1


class BaselineError(Exception):
    """An unreadable or malformed baseline file: one line, exit 2."""


def _relative_to(directory: Path):
    base = directory.resolve()

    def relative(path: str) -> str:
        try:
            return Path(os.path.relpath(Path(path).resolve(), base)).as_posix()
        except ValueError:  # another drive (Windows)
            return Path(path).as_posix()

    return relative


def entries(diagnostics: list[Diagnostic], sources: Mapping[str, SourceText], directory: Path) -> list[dict]:
    relative = _relative_to(directory)
    found = []
    for d, material in zip(diagnostics, fingerprint_materials(diagnostics, sources, path_of=relative), strict=True):
        entry = {
            "code": d.code,
            "path": relative(d.location.path),
            "fingerprint": fingerprint(material),
            "line": d.location.line,
            "message": d.message,
        }
        if d.location.cell is not None:
            entry["cell"] = d.location.cell
        found.append(entry)
    return found


def write_baseline(
    path: Path, diagnostics: list[Diagnostic], sources: Mapping[str, SourceText], refuse: Iterable = ()
) -> int:
    """Write the baseline atomically (an old one survives a full disk); never over one of `refuse` (the files the
    run checked)."""
    from mpdoctor._version import __version__

    data = {
        "version": VERSION,
        "tool": {"name": "mpdoctor", "version": __version__},
        "findings": entries(diagnostics, sources, path.parent),
    }
    try:
        write_atomic(path, json.dumps(data, indent=2) + "\n", refuse=refuse)
    except OSError as exc:
        raise BaselineError(f"{path}: cannot write baseline: {exc.strerror or exc}") from None
    return len(data["findings"])


def load_baseline(path: Path) -> Counter:
    """The (code, path, fingerprint) keys the file lists, with their counts."""
    try:
        data = json.loads(reads.read_text(path, reads.BASELINE_LIMIT, "baseline"))
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such baseline file (create it with --write-baseline)") from None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: not a mpdoctor baseline: invalid JSON ({exc})") from None
    except RecursionError:
        raise BaselineError(f"{path}: not a mpdoctor baseline: JSON nested too deeply") from None
    findings = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(findings, list) or data.get("version") != VERSION:
        raise BaselineError(f'{path}: not a mpdoctor baseline (version {VERSION} with a "findings" list)')
    keys: Counter = Counter()
    for item in findings:
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("code", "path", "fingerprint")):
            raise BaselineError(f"{path}: not a mpdoctor baseline: a finding lacks code, path or fingerprint")
        keys[(item["code"], item["path"], item["fingerprint"])] += 1
    return keys


def split(
    diagnostics: list[Diagnostic], sources: Mapping[str, SourceText], keys: Counter, directory: Path
) -> tuple[list[Diagnostic], int]:
    """(findings the baseline does not list, how many it does)."""
    remaining = Counter(keys)
    new, baselined = [], 0
    for d, entry in zip(diagnostics, entries(diagnostics, sources, directory), strict=True):
        key = (entry["code"], entry["path"], entry["fingerprint"])
        if remaining[key] > 0:
            remaining[key] -= 1
            baselined += 1
        else:
            new.append(d)
    return new, baselined
