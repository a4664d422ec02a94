"""Fixture files under tests/fixtures/<CODE>/ are checked through the real pipeline.

Conventions (one file, one scenario):
- A trailing `# expect: MP401` (or `# expect: MP201, MP207`) marks a line where exactly those codes must be
  reported. A file with no `expect` marker is a negative case.
- Compared codes: the directory's code, plus any listed in a `# fixture-codes: MP201 MP207` header line.
  Diagnostics of other codes are ignored so that rules stay independently testable.
- `# fixture-config: keras-version=2 assume-policy=mixed_float16` sets configuration for that file.
"""

from __future__ import annotations

import re
from pathlib import Path

from mpdoctor.config import Config, apply_overrides
from mpdoctor.engine import check_source

FIXTURES = Path(__file__).parent / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>MP\d{3}(?:\s*,\s*MP\d{3})*)")
_CODES = re.compile(r"#\s*fixture-codes:\s*(?P<codes>.*)")
_CONFIG = re.compile(r"#\s*fixture-config:\s*(?P<items>.*)")


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("MP*/**/*.py"))


def expectations(path: Path) -> tuple[set[str], set[tuple[int, str]], dict]:
    """(compared codes, expected (line, code), configuration) from the file's markers; the compared codes include
    the code its directory is named after (tests/fixtures/MP401/...), if any."""
    text = path.read_text(encoding="utf-8")
    codes = {part for part in path.parts if re.fullmatch(r"MP\d{3}", part)}
    expected: set[tuple[int, str]] = set()
    options: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if m := _EXPECT.search(line):
            expected |= {(number, c.strip()) for c in m["codes"].split(",")}
        if m := _CODES.search(line):
            codes |= set(re.findall(r"MP\d{3}", m["codes"]))
        if m := _CONFIG.search(line):
            for item in m["items"].split():
                key, _, value = item.partition("=")
                options[key.replace("-", "_")] = value
    return codes, expected, options


def run_fixture(path: Path) -> tuple[set[tuple[int, str]], set[tuple[int, str]]]:
    """(expected, actual) pairs of (line, code) restricted to the fixture's compared codes."""
    codes, expected, options = expectations(path)
    config = Config()
    apply_overrides(config, str(path), **options)
    rel = path.relative_to(FIXTURES.parent.parent).as_posix()
    diagnostics, error = check_source(path.read_text(encoding="utf-8"), rel, config)
    assert error is None, error.render()
    actual = {(d.location.line, d.code) for d in diagnostics if d.code in codes}
    return expected, actual
