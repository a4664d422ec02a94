"""One finding per root cause across modules (issue 31): a package whose modules all import one that uses the
removed `mixed_precision.experimental` (tests/data/root_cause/, each file's docstring saying what running it
showed). The failure is reported once, MP103 at the line of the removed import; each importer's run fails there too
and gets one info pointing at it, not an MP001 error each. A failure in another module that no finding explains
stays the importer's MP001."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "root_cause"


@pytest.fixture(scope="module")
def report(tensorflow, tmp_path_factory) -> tuple[int, dict[str, list[dict]]]:
    copy = tmp_path_factory.mktemp("root_cause") / "root_cause"
    shutil.copytree(FIXTURE, copy)
    result = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--no-cache", "--format", "json", "."],
        cwd=copy,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=900,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    found: dict[str, list[dict]] = {}
    for diagnostic in json.loads(result.stdout)["diagnostics"]:
        found.setdefault(diagnostic["path"], []).append(diagnostic)
    return result.returncode, found


def test_the_removed_api_is_reported_once_where_it_is(report):
    _, found = report
    assert sorted((d["code"], d["line"]) for d in found["netlib/precision.py"]) == [("MP103", 5), ("MP103", 8)]
    # decoder.py's static MP401 (its softmax head under the policy precision.py sets where the code runs) is no
    # failure of the run; the failure's own findings are the MP103s and the unexplained MP001.
    errors = [
        (path, d["code"])
        for path, ds in found.items()
        for d in ds
        if d["severity"] == "error" and d["code"] in ("MP001", "MP103")
    ]
    assert sorted(errors) == [("netlib/precision.py", "MP103"), ("netlib/precision.py", "MP103"), *UNEXPLAINED]


UNEXPLAINED = [("netlib/uses_settings.py", "MP001")]


@pytest.mark.parametrize(("module", "line"), [("encoder", 5), ("decoder", 5), ("train", 5)])
def test_each_importer_gets_one_info_pointing_at_the_cause(report, module, line):
    _, found = report
    [info] = [d for d in found[f"netlib/{module}.py"] if d["code"] == "MP001"]
    assert (info["severity"], info["line"]) == ("info", line)
    assert info["message"].startswith(
        "not traced: the run failed in netlib/precision.py:5, reported there as MP103; static findings only"
    )


def test_a_failure_elsewhere_that_no_finding_explains_stays_the_importers_error(report):
    code, found = report
    [error] = found["netlib/uses_settings.py"]
    assert (error["code"], error["severity"], error["line"]) == ("MP001", "error", 6)
    assert "FileNotFoundError" in error["message"]
    assert code == 1
