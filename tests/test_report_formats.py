"""The CI formats: SARIF 2.1.0, GitHub workflow commands, JUnit XML and GitLab Code Quality."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mpdoctor import registry
from mpdoctor._version import __version__
from mpdoctor.diagnostics import Confidence, Diagnostic, Edit, FileError, Fix, Location, Report, Severity
from mpdoctor.report import FORMATS, github, sarif, write_report
from mpdoctor.sources import SourceText, read_source

HOSTILE = "bad <script>alert(\"x\")</script> & 'q'\n50% done, a: b\r\nnext::line %0A"


def rules():
    registry.load_rules()
    return registry.all_rules()


def codes():
    return [r.code for r in rules()]


SAME = object()


def diag(
    code="MP002",
    message="something is off",
    path="pkg/model.py",
    line=3,
    column=5,
    end_line=SAME,
    end_column=9,
    severity=Severity.INFO,
    **kwargs,
) -> Diagnostic:
    end_line = line if end_line is SAME else end_line
    return Diagnostic(
        code=code,
        message=message,
        location=Location(path, line, column, end_line, end_column),
        severity=severity,
        **kwargs,
    )


def render(fmt: str, report: Report) -> str:
    stream = io.StringIO()
    write_report(report, fmt, stream, colour=True, statistics=True, quiet=False)
    return stream.getvalue()


def sarif_of(report: Report) -> dict:
    return json.loads(render("sarif", report))


def result_of(report: Report) -> dict:
    return sarif_of(report)["runs"][0]["results"][0]


# --- a strict subset of the SARIF 2.1.0 schema (OASIS sarif-schema-2.1.0.json) ----------------------------------
# The full schema cannot be fetched here; these definitions copy its structure for every object mpdoctor emits,
# with additionalProperties false as in the original, so an unknown or misspelt key fails validation.


def _obj(properties: dict, required=(), any_of=None) -> dict:
    schema = {"type": "object", "additionalProperties": False, "properties": {**properties, "properties": REF("bag")}}
    if required:
        schema["required"] = list(required)
    if any_of:
        schema["anyOf"] = [{"required": [r]} for r in any_of]
    return schema


def REF(name: str) -> dict:
    return {"$ref": f"#/definitions/{name}"}


def ARRAY(name: str, min_items: int = 0) -> dict:
    return {"type": "array", "minItems": min_items, "items": REF(name)}


STRING = {"type": "string"}
LEVEL = {"enum": ["none", "note", "warning", "error"]}
POSITIVE = {"type": "integer", "minimum": 1}
INDEX = {"type": "integer", "minimum": -1}

SARIF_SUBSET_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    **_obj({"$schema": STRING, "version": {"enum": ["2.1.0"]}, "runs": ARRAY("run")}, ["version", "runs"]),
    "definitions": {
        "bag": {
            "type": "object",
            "additionalProperties": True,
            "properties": {"tags": {"type": "array", "uniqueItems": True, "items": STRING}},
        },
        "run": _obj(
            {
                "tool": REF("tool"),
                "invocations": ARRAY("invocation"),
                "results": ARRAY("result"),
                "originalUriBaseIds": {"type": "object", "additionalProperties": REF("artifactLocation")},
                "columnKind": {"enum": ["utf16CodeUnits", "unicodeCodePoints"]},
            },
            ["tool"],
        ),
        "tool": _obj({"driver": REF("toolComponent")}, ["driver"]),
        "toolComponent": _obj(
            {
                "name": STRING,
                "version": STRING,
                "semanticVersion": STRING,
                "informationUri": STRING,
                "rules": ARRAY("reportingDescriptor"),
            },
            ["name"],
        ),
        "reportingDescriptor": _obj(
            {
                "id": STRING,
                "name": STRING,
                "shortDescription": REF("mfString"),
                "fullDescription": REF("mfString"),
                "help": REF("mfString"),
                "helpUri": STRING,
                "defaultConfiguration": REF("reportingConfiguration"),
            },
            ["id"],
        ),
        "reportingConfiguration": _obj({"enabled": {"type": "boolean"}, "level": LEVEL}),
        "reportingDescriptorReference": _obj({"id": STRING, "index": INDEX}, any_of=["id", "index"]),
        "mfString": _obj({"text": STRING, "markdown": STRING}, ["text"]),
        "message": _obj({"text": STRING, "markdown": STRING, "id": STRING}, any_of=["text", "id"]),
        "invocation": _obj(
            {"executionSuccessful": {"type": "boolean"}, "toolExecutionNotifications": ARRAY("notification")},
            ["executionSuccessful"],
        ),
        "notification": _obj(
            {
                "level": LEVEL,
                "message": REF("message"),
                "locations": ARRAY("location"),
                "descriptor": REF("reportingDescriptorReference"),
            },
            ["message"],
        ),
        "result": _obj(
            {
                "ruleId": STRING,
                "ruleIndex": INDEX,
                "level": LEVEL,
                "message": REF("message"),
                "locations": ARRAY("location"),
                "fixes": ARRAY("fix"),
                "partialFingerprints": {"type": "object", "additionalProperties": STRING},
            },
            ["message"],
        ),
        "location": _obj(
            {
                "physicalLocation": REF("physicalLocation"),
                "logicalLocations": ARRAY("logicalLocation"),
                "message": REF("message"),
            }
        ),
        "logicalLocation": _obj({"name": STRING, "fullyQualifiedName": STRING, "kind": STRING}),
        "physicalLocation": _obj(
            {"artifactLocation": REF("artifactLocation"), "region": REF("region")}, any_of=["artifactLocation"]
        ),
        "artifactLocation": _obj({"uri": STRING, "uriBaseId": STRING, "index": INDEX}),
        "region": _obj({"startLine": POSITIVE, "startColumn": POSITIVE, "endLine": POSITIVE, "endColumn": POSITIVE}),
        "fix": _obj(
            {"description": REF("message"), "artifactChanges": ARRAY("artifactChange", 1)}, ["artifactChanges"]
        ),
        "artifactChange": _obj(
            {"artifactLocation": REF("artifactLocation"), "replacements": ARRAY("replacement", 1)},
            ["artifactLocation", "replacements"],
        ),
        "replacement": _obj(
            {"deletedRegion": REF("region"), "insertedContent": REF("artifactContent")}, ["deletedRegion"]
        ),
        "artifactContent": _obj({"text": STRING, "binary": STRING}),
    },
}


def validate_sarif(log: dict) -> None:
    """Schema validation where `jsonschema` is installed (the dev extra): the subset above, then the official OASIS
    schema vendored in tests/data; the callers' own assertions run either way (the visible skip is
    test_sarif_validates_against_the_schema)."""
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.Draft7Validator.check_schema(SARIF_SUBSET_SCHEMA)
    jsonschema.Draft7Validator(SARIF_SUBSET_SCHEMA).validate(log)
    jsonschema.Draft4Validator(official_schema()).validate(log)


def official_schema() -> dict:
    """The OASIS SARIF 2.1.0 schema (tests/data/README.md says where the copy comes from)."""
    return json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


def full_report() -> Report:
    first, *_ = codes()
    return Report(
        diagnostics=[
            diag(first, "an error", line=2, severity=Severity.ERROR),
            diag(
                "MP002", "a warning", line=4, severity=Severity.WARNING, confidence=Confidence.MEDIUM, notes=("a note",)
            ),
            diag(
                "MP002",
                "unused suppression",
                line=7,
                column=8,
                end_column=21,
                fix=Fix("remove the comment", (Edit("pkg/model.py", 7, 6, 7, 21, ""),)),
            ),
        ],
        errors=[
            FileError("pkg/broken.py", "syntax error: invalid syntax", 1, 5, kind="syntax"),
            FileError("missing.py", "no such file or directory", kind="io"),
        ],
        files_checked=2,
    )


# --- the registry of formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["sarif", "github", "junit", "gitlab"])
def test_every_format_renders_an_empty_report_without_ansi(fmt):
    out = render(fmt, Report())
    assert fmt in FORMATS
    assert "\x1b" not in out
    assert out.endswith("\n") or out == ""


@pytest.mark.parametrize("fmt", ["sarif", "github", "junit", "gitlab"])
def test_no_ansi_even_with_colour_requested(fmt):
    assert "\x1b[" not in render(fmt, full_report())


# --- SARIF -----------------------------------------------------------------------------------------------------


def test_sarif_log_and_driver():
    log = sarif_of(full_report())
    validate_sarif(log)
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    assert len(log["runs"]) == 1
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["name"] == "mpdoctor"
    assert driver["version"] == __version__
    assert driver["informationUri"] == "https://github.com/mpdoctor/mpdoctor"


def test_sarif_validates_against_the_schema():
    pytest.importorskip("jsonschema")
    validate_sarif(sarif_of(full_report()))
    validate_sarif(sarif_of(Report()))


def test_sarif_lists_every_registered_rule_with_its_documentation():
    driver = sarif_of(Report())["runs"][0]["tool"]["driver"]
    assert [r["id"] for r in driver["rules"]] == codes()
    levels = {"error": "error", "warning": "warning", "info": "note"}
    for descriptor, rule in zip(driver["rules"], rules(), strict=True):
        assert descriptor["name"] == rule.name
        assert descriptor["shortDescription"] == {"text": rule.summary}
        assert descriptor["fullDescription"] == {"text": rule.what}
        for part in (rule.what, rule.why, rule.bad, rule.good, rule.fix):
            assert part in descriptor["help"]["text"]
            assert part in descriptor["help"]["markdown"]
        assert "```python\n" + rule.bad + "\n```" in descriptor["help"]["markdown"]
        assert descriptor["defaultConfiguration"] == {
            "level": levels[rule.severity.value],
            "enabled": rule.code != "MP603",  # the one opt-in rule
        }
        assert descriptor["properties"]["passes"] == list(rule.pass_names)
        assert "mixed-precision" in descriptor["properties"]["tags"]


def test_sarif_result_fields():
    report = full_report()
    run = sarif_of(report)["runs"][0]
    results = run["results"]
    assert [r["ruleId"] for r in results] == [d.code for d in report.diagnostics]
    assert [r["level"] for r in results] == ["error", "warning", "note"]
    for r in results:
        assert run["tool"]["driver"]["rules"][r["ruleIndex"]]["id"] == r["ruleId"]
    second = results[1]
    assert second["message"] == {"text": "a warning"}
    assert second["locations"] == [
        {
            "physicalLocation": {
                "artifactLocation": {"uri": "pkg/model.py", "uriBaseId": "%SRCROOT%"},
                "region": {"startLine": 4, "startColumn": 5, "endLine": 4, "endColumn": 9},
            }
        }
    ]
    assert second["properties"]["confidence"] == "medium"
    assert second["properties"]["notes"] == ["a note"]
    assert "fixes" not in second
    assert set(second["partialFingerprints"]) == {sarif.FINGERPRINT_KEY}
    assert re.fullmatch(r"[0-9a-f]{64}", second["partialFingerprints"][sarif.FINGERPRINT_KEY])


def test_sarif_fix():
    fixed = sarif_of(full_report())["runs"][0]["results"][2]
    assert fixed["fixes"] == [
        {
            "description": {"text": "remove the comment"},
            "artifactChanges": [
                {
                    "artifactLocation": {"uri": "pkg/model.py", "uriBaseId": "%SRCROOT%"},
                    "replacements": [
                        {
                            "deletedRegion": {"startLine": 7, "startColumn": 6, "endLine": 7, "endColumn": 21},
                            "insertedContent": {"text": ""},
                        }
                    ],
                }
            ],
            "properties": {"applicability": "safe"},
        }
    ]


def test_sarif_file_errors_are_tool_execution_notifications():
    invocation = sarif_of(full_report())["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    first, second = invocation["toolExecutionNotifications"]
    assert first["level"] == "error"
    assert first["message"]["text"] == "pkg/broken.py:1:5: syntax error: invalid syntax"
    assert first["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "pkg/broken.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 1, "startColumn": 5},
    }
    assert second["message"]["text"] == "missing.py: no such file or directory"
    assert "region" not in second["locations"][0]["physicalLocation"]
    clean = sarif_of(Report(files_checked=1))
    validate_sarif(clean)
    assert clean["runs"][0]["invocations"] == [{"executionSuccessful": True}]
    assert clean["runs"][0]["results"] == []


def test_sarif_uris_are_relative_posix_and_percent_encoded(tmp_path):
    result = result_of(Report([diag(path="./src dir/a#b.py")]))
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "src%20dir/a%23b.py",
        "uriBaseId": "%SRCROOT%",
    }
    outside = tmp_path / "elsewhere.py"
    result = result_of(Report([diag(path=str(outside))]))
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": outside.as_uri()}


def test_sarif_hostile_message_round_trips():
    log = sarif_of(Report([diag(message=HOSTILE)], [FileError("x.py", HOSTILE)]))
    validate_sarif(log)
    assert log["runs"][0]["results"][0]["message"]["text"] == HOSTILE
    assert log["runs"][0]["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"] == f"x.py: {HOSTILE}"


def test_sarif_unknown_code_has_no_rule_index():
    result = result_of(Report([diag(code="MP999")]))
    assert result["ruleId"] == "MP999"
    assert "ruleIndex" not in result


def test_sarif_end_position_defaults():
    result = result_of(Report([diag(end_line=None, end_column=None, line=6, column=2)]))
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": 6, "startColumn": 2, "endLine": 6}


# --- fingerprints -------------------------------------------------------------------------------------------------


def _fingerprints(report: Report) -> tuple[list[str], list[str]]:
    """SARIF and GitLab fingerprints of a report whose sources are the files on disk now (the engine keeps the text
    it analysed in the report; renderers never read files)."""
    for d in report.diagnostics:
        if Path(d.location.path).exists():
            report.sources[d.location.path] = SourceText(Path(d.location.path), read_source(Path(d.location.path)))
    s = [r["partialFingerprints"][sarif.FINGERPRINT_KEY] for r in sarif_of(report)["runs"][0]["results"]]
    g = [i["fingerprint"] for i in json.loads(render("gitlab", report))]
    return s, g


def test_fingerprint_survives_a_line_shift_but_not_another_file_or_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = "import tensorflow as tf\nx = tf.keras.layers.Dense(1)  # noqa: MP002\n"
    Path("a.py").write_text(body)
    Path("b.py").write_text(body)
    before = _fingerprints(Report([diag(path="a.py", line=2)]))
    Path("a.py").write_text("# a new header\n\n\n" + body)
    after = _fingerprints(Report([diag(path="a.py", line=5, message="something else entirely")]))
    assert before == after
    other_file = _fingerprints(Report([diag(path="b.py", line=2)]))
    other_code = _fingerprints(Report([diag(code=codes()[0], path="a.py", line=5)]))
    other_line = _fingerprints(Report([diag(path="a.py", line=4)]))
    for other in (other_file, other_code, other_line):
        assert other[0] != before[0] and other[1] != before[1]
    assert re.fullmatch(r"[0-9a-f]{32}", before[1][0])


def test_fingerprint_falls_back_to_the_message_when_the_source_is_not_known(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = _fingerprints(Report([diag(path="gone.py", line=2, message="m1")]))
    b = _fingerprints(Report([diag(path="gone.py", line=40, message="m1")]))
    c = _fingerprints(Report([diag(path="gone.py", line=2, message="m2")]))
    assert a == b
    assert a[0] != c[0] and a[1] != c[1]


def test_identical_findings_get_distinct_fingerprints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("a.py").write_text("x = 1  # noqa: MP002\nx = 1  # noqa: MP002\n")
    s, g = _fingerprints(Report([diag(path="a.py", line=1), diag(path="a.py", line=2)]))
    assert len(set(s)) == 2 and len(set(g)) == 2


# --- GitHub Actions -----------------------------------------------------------------------------------------------


def _unescape(value: str) -> str:
    return value.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """Parse one workflow command the way the Actions runner does."""
    assert line.startswith("::")
    head, message = line[2:].split("::", 1)
    name, _, props = head.partition(" ")
    properties = {}
    for pair in props.split(",") if props else []:
        key, value = pair.split("=", 1)
        properties[key] = _unescape(value)
    return name, properties, _unescape(message)


def test_github_commands():
    lines = render("github", full_report()).splitlines()
    assert len(lines) == 5
    first_rule = rules()[0]
    assert lines[0] == (
        f"::error file=pkg/model.py,line=2,col=5,endLine=2,endColumn=9,"
        f"title={first_rule.code} ({first_rule.name})::an error"
    )
    assert lines[1].startswith("::warning file=pkg/model.py,line=4,col=5,")
    assert lines[1].endswith(",title=MP002 (unused-suppression)::a warning")
    assert lines[2].startswith("::notice file=pkg/model.py,line=7,col=8,endLine=7,endColumn=21,")
    assert lines[3] == (
        "::error file=pkg/broken.py,line=1,col=5,title=mpdoctor (syntax error)::syntax error: invalid syntax"
    )
    assert lines[4] == "::error file=missing.py,title=mpdoctor (io error)::no such file or directory"


def test_github_escaping_of_hostile_messages_and_paths():
    report = Report([diag(message=HOSTILE, path="we,ird:dir/100%.py")], [FileError("a,b.py", "line1\nline2")])
    out = render("github", report)
    lines = out.splitlines()
    assert len(lines) == 2  # no newline from the data leaks into the output
    assert "\r" not in out
    assert lines[0].endswith("::bad <script>alert(\"x\")</script> & 'q'%0A50%25 done, a: b%0D%0Anext::line %250A")
    assert "file=we%2Cird%3Adir/100%25.py," in lines[0]
    name, props, message = parse_command(lines[0])
    assert name == "notice"
    assert props["file"] == "we,ird:dir/100%.py"
    assert props["title"] == "MP002 (unused-suppression)"
    assert message == HOSTILE
    name, props, message = parse_command(lines[1])
    assert (name, props, message) == ("error", {"file": "a,b.py", "title": "mpdoctor (error error)"}, "line1\nline2")


def test_github_escape_functions():
    assert github.escape_data("%\r\n:,") == "%25%0D%0A:,"
    assert github.escape_property("%\r\n:,") == "%25%0D%0A%3A%2C"


def test_github_unknown_code_title():
    assert "title=MP999::" in render("github", Report([diag(code="MP999")]))


# --- JUnit ---------------------------------------------------------------------------------------------------------


def parse_junit(report: Report) -> ET.Element:
    out = render("junit", report)
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    return ET.fromstring(out.encode("utf-8"))


def test_junit_structure_and_counts():
    root = parse_junit(full_report())
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "mpdoctor"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "3", "2")
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("pkg/model.py", f"{codes()[0]} 2:5"),
        ("pkg/model.py", "MP002 4:5"),
        ("pkg/model.py", "MP002 7:8"),
        ("pkg/broken.py", "syntax error 1:5"),
        ("missing.py", "io error"),
    ]
    failure = cases[1].find("failure")
    assert failure.get("type") == "MP002"
    assert failure.get("message") == "a warning"
    assert failure.text.startswith("pkg/model.py:4:5: MP002 unused-suppression (warning): a warning")
    assert "note: a note" in failure.text
    assert "fix (safe): remove the comment" in cases[2].find("failure").text
    error = cases[3].find("error")
    assert (error.get("type"), error.get("message")) == ("syntax", "syntax error: invalid syntax")
    assert cases[3].find("failure") is None


def test_junit_clean_run_has_one_passing_testcase():
    suite = parse_junit(Report(files_checked=3)).find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "0")
    (case,) = suite.findall("testcase")
    assert case.get("name") == "mpdoctor"
    assert list(case) == []


def test_junit_escaping_of_hostile_messages():
    nasty = HOSTILE + "\x00\x1b[31m\ufffe"
    root = parse_junit(Report([diag(message=nasty, path='a"<b>&.py')], [FileError("c.py", nasty)]))
    case, error_case = root.find("testsuite").findall("testcase")
    assert case.get("classname") == 'a"<b>&.py'
    expected = HOSTILE + "\ufffd\ufffd[31m\ufffd"  # characters XML 1.0 cannot carry are replaced
    assert case.find("failure").get("message") == expected
    assert expected.replace("\r\n", "\n") in case.find("failure").text  # XML normalises line ends in text
    assert error_case.find("error").get("message") == expected
    assert root.find("testsuite").find("testcase/failure") is not None


def test_junit_output_is_ascii_with_character_references():
    out = render("junit", Report([diag(message="dtype \u00e9\u4e2d\U0001f600")]))
    out.encode("ascii")
    assert ET.fromstring(out.encode("utf-8")).find(".//failure").get("message") == "dtype \u00e9\u4e2d\U0001f600"


# --- GitLab Code Quality -------------------------------------------------------------------------------------------


def test_gitlab_issues():
    issues = json.loads(render("gitlab", full_report()))
    assert isinstance(issues, list) and len(issues) == 5
    first = issues[1]
    assert set(first) == {"description", "check_name", "fingerprint", "severity", "location"}
    assert first["description"] == "MP002: a warning"
    assert first["check_name"] == "MP002"
    assert first["location"] == {"path": "pkg/model.py", "lines": {"begin": 4, "end": 4}}
    assert [i["severity"] for i in issues] == ["critical", "major", "info", "critical", "critical"]
    assert issues[3]["check_name"] == "mpdoctor/syntax-error"
    assert issues[3]["location"] == {"path": "pkg/broken.py", "lines": {"begin": 1, "end": 1}}
    assert issues[4]["location"] == {"path": "missing.py", "lines": {"begin": 1, "end": 1}}
    assert len({i["fingerprint"] for i in issues}) == 5
    assert json.loads(render("gitlab", Report())) == []


def test_gitlab_multiline_and_hostile():
    (issue,) = json.loads(render("gitlab", Report([diag(message=HOSTILE, line=3, end_line=6, path=r"./x/y.py")])))
    assert issue["description"] == f"MP002: {HOSTILE}"
    assert issue["location"] == {"path": "x/y.py", "lines": {"begin": 3, "end": 6}}


# --- through the command line ----------------------------------------------------------------------------------------

SOURCE = "import tensorflow as tf\n\nx = 1  # noqa: MP002\n"


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR",)}
    return subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--no-trace", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(SOURCE)
    return tmp_path / "model.py"


def test_cli_sarif(tmp_path, model_file):
    proc = run_cli(tmp_path, "--format", "sarif", "--color", "always", "model.py")
    assert proc.returncode == 0, proc.stderr  # MP002 is info: below the default --fail-on
    log = json.loads(proc.stdout)
    validate_sarif(log)
    (result,) = log["runs"][0]["results"]
    assert result["ruleId"] == "MP002"
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "model.py",
        "uriBaseId": "%SRCROOT%",
    }
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 3
    assert result["fixes"][0]["artifactChanges"][0]["replacements"][0]["deletedRegion"]["startLine"] == 3
    assert log["runs"][0]["invocations"] == [{"executionSuccessful": True}]


def test_cli_github(tmp_path, model_file):
    proc = run_cli(tmp_path, "--format", "github", "model.py")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("::notice file=model.py,line=3,col=8,")
    assert ",title=MP002 (unused-suppression)::" in line


def test_cli_junit_to_output_file(tmp_path, model_file):
    proc = run_cli(tmp_path, "--format", "junit", "-o", "report.xml", "model.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    root = ET.parse(tmp_path / "report.xml").getroot()
    (case,) = root.iter("testcase")
    assert (case.get("classname"), case.get("name")) == ("model.py", "MP002 3:8")


def test_cli_gitlab_with_a_broken_file(tmp_path, model_file):
    (tmp_path / "broken.py").write_text("def (:\n")
    proc = run_cli(tmp_path, "--format", "gitlab", "model.py", "broken.py")
    assert proc.returncode == 2
    issues = json.loads(proc.stdout)
    assert [(i["check_name"], i["location"]["path"]) for i in issues] == [
        ("MP002", "model.py"),
        ("mpdoctor/syntax-error", "broken.py"),
    ]
    assert issues[0]["location"]["lines"] == {"begin": 3, "end": 3}


def test_cli_fingerprint_stable_when_lines_are_inserted(tmp_path, model_file):
    before = json.loads(run_cli(tmp_path, "--format", "gitlab", "model.py").stdout)[0]["fingerprint"]
    model_file.write_text("# header\n" + SOURCE)
    after = json.loads(run_cli(tmp_path, "--format", "gitlab", "model.py").stdout)
    assert after[0]["location"]["lines"]["begin"] == 4
    assert after[0]["fingerprint"] == before


def test_the_schema_subset_rejects_a_misspelt_key():
    jsonschema = pytest.importorskip("jsonschema")
    log = sarif_of(full_report())
    log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startcolumn"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SARIF_SUBSET_SCHEMA).validate(log)
