"""Fixes over the wild corpus (issue 19): by code, how many fixes `check --no-trace --diff --unsafe-fixes --keras-version 3` proposes,
applies and refuses, and why. Refused by the rule: the finding says "not fixed automatically"; refused by autofix:
a fix proposed but not applied (def-use guard, parse check, ...).

    PYTHONPATH=. python tests/data/wild/fix_counts.py [--diff]
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

os.environ.pop("TF_USE_LEGACY_KERAS", None)  # Keras 3, as tests/test_wild_corpus.py

from mpdoctor.fix.run import fix_report  # noqa: E402
from mpdoctor.config import Config  # noqa: E402
from mpdoctor.engine import TraceOptions, check_paths  # noqa: E402

FILES = Path(__file__).parent / "files"


def ported_to_keras3() -> Config:
    """The files target Keras 2 by their own code; the fixes that matter are those of a user porting them to Keras 3
    (`--keras-version 3`), where MP103 rewrites their loss scaling."""
    config = Config()
    config.keras_version = 3
    return config


def counts(files: list[Path]):
    report = check_paths(files, ported_to_keras3())
    proposed = Counter(d.code for d in report.diagnostics if d.fix and d.fix.edits)
    by_rule = Counter(d.code for d in report.diagnostics if "not fixed automatically" in d.message)
    reasons = Counter(
        (d.code, d.message.split("not fixed automatically: ", 1)[1].split(";")[0])
        for d in report.diagnostics
        if "not fixed automatically" in d.message
    )
    fix_report(report, ported_to_keras3(), TraceOptions(enabled=False), unsafe=True, write=False)
    applied, refused = Counter(), Counter()
    for result in report.fixes:
        applied.update(d.code for d in result.applied)
        refused.update(d.code for d, _ in result.not_applied)
        reasons.update((d.code, why) for d, why in result.not_applied)
    return report, proposed, applied, refused, by_rule, reasons


def main() -> None:
    files = sorted(p for p in FILES.iterdir() if p.is_file())
    report, proposed, applied, refused, by_rule, reasons = counts(files)
    print(f"{'code':6} {'proposed':>8} {'applied':>8} {'refused (autofix)':>18} {'refused (rule)':>15}")
    for code in sorted(set(proposed) | set(by_rule)):
        print(f"{code:6} {proposed[code]:8} {applied[code]:8} {refused[code]:18} {by_rule[code]:15}")
    print(f"files changed: {sum(r.changed for r in report.fixes)} of {len(files)}")
    for (code, why), n in sorted(reasons.items()):
        print(f"  {n:3} {code} {why}")
    if "--diff" in sys.argv:
        for result in report.fixes:
            print(result.diff())


if __name__ == "__main__":
    main()
