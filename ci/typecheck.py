"""The type check: mypy over mpdoctor/ (configuration in pyproject.toml), held to a baseline that only shrinks.

    python ci/typecheck.py            # fails on an error not in ci/mypy-baseline.txt, or on a baseline entry gone
    python ci/typecheck.py --update   # rewrite the baseline after fixing errors (never to add one)

The strict modules (facts, registry, diagnostics, engine, renderers) may have no baseline entry at all. Entries are
`path: [code] message` with a count and without line numbers, so an edit above an old error does not make it new.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "ci" / "mypy-baseline.txt"


def _strict_modules() -> re.Pattern[str]:
    """The paths of the modules pyproject.toml's mypy configuration checks strictly (`disallow_untyped_defs`)."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["overrides"]
    modules = [m for o in overrides if o.get("disallow_untyped_defs") for m in o["module"]]
    paths = [
        re.escape(m.removesuffix(".*").replace(".", "/")) + ("/" if m.endswith(".*") else r"\.py") for m in modules
    ]
    return re.compile(f"^(?:{'|'.join(paths)})")


STRICT = _strict_modules()
_ERROR = re.compile(r"^(?P<path>[^:]+):\d+(?::\d+)?: error: (?P<message>.*?)\s+\[(?P<code>[a-z-]+)\]$")


def current_errors() -> collections.Counter[str]:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context", "--no-pretty"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if result.returncode not in (0, 1) or result.stderr.strip():
        sys.exit(f"mypy did not run: {result.stderr.strip() or result.stdout.strip()}")
    found: collections.Counter[str] = collections.Counter()
    for line in result.stdout.splitlines():
        match = _ERROR.match(line)
        if match:
            found[f"{match['path']}: [{match['code']}] {match['message']}"] += 1
        elif ": error:" in line:
            sys.exit(f"unparsed mypy output: {line}")
    return found


def read_baseline() -> collections.Counter[str]:
    entries: collections.Counter[str] = collections.Counter()
    if BASELINE.exists():
        for line in BASELINE.read_text(encoding="utf-8").splitlines():
            count, _, entry = line.partition(" ")
            if entry:
                entries[entry] = int(count)
    return entries


def write_baseline(errors: collections.Counter[str]) -> None:
    lines = [f"{count} {entry}" for entry, count in sorted(errors.items())]
    BASELINE.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite the baseline from the current errors")
    args = parser.parse_args(argv)
    errors = current_errors()
    strict = sorted(entry for entry in errors if STRICT.match(entry))
    if strict:
        print("errors in strict modules (never baselined):", *strict, sep="\n  ")
        return 1
    if args.update:
        write_baseline(errors)
        print(f"{BASELINE.relative_to(ROOT)}: {sum(errors.values())} errors in {len(errors)} entries")
        return 0
    baseline = read_baseline()
    new = errors - baseline
    fixed = baseline - errors
    if new:
        print("new mypy errors (fix them; the baseline never grows):", *sorted(new), sep="\n  ")
    if fixed:
        print(
            f"{sum(fixed.values())} baselined errors are gone: run `python ci/typecheck.py --update` to shrink it:",
            *sorted(fixed),
            sep="\n  ",
        )
    if new or fixed:
        return 1
    print(f"mypy: no new errors ({sum(errors.values())} baselined in {len(errors)} entries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
