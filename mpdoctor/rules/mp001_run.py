"""MP001 trace-failed and MP002 unused-suppression: the run itself. The engine raises both, through what this module
registers: MP001 is the code of a failed run (the trace child fails, or the run's exception is explained by no other
rule; its messages are mpdoctor.trace.failures'), MP002 the check of the suppressions after they were applied."""

from __future__ import annotations

from collections.abc import Callable

from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location
from mpdoctor.registry import define_rule, get_rule, raised_by_engine, unused_suppressions_check
from mpdoctor.static.source import source_lines
from mpdoctor.suppress import ALL

define_rule(
    "MP001",
    "trace-failed",
    "error",
    "T",
    False,
    summary="Importing the file or building/calling the model raised, and no other rule explains it.",
    what="""
        The trace pass imports the model file in a child process and builds and calls every model it finds. When
        that raises (or the child crashes or times out) and no more specific rule explains the exception, MP001
        reports the exception type, its message and the frame in your file that raised it.
        """,
    why="""
        A model that cannot be built cannot be checked: every trace-based rule was skipped for it. Static findings
        for the file are still reported. When mpdoctor itself cannot trace in this environment (its hooks do not
        fit the installed TensorFlow/Keras, or one of them failed), MP001 says so at info severity: "mpdoctor
        cannot trace on TensorFlow X / Keras Y: <reason>" (`--verbose` prints mpdoctor's traceback); that is
        never an exception of your code, and the static findings are reported as usual.
        """,
    bad="""
        import keras

        inputs = keras.Input((4,))
        x = keras.layers.Reshape((3, 2))(inputs)   # raises: 4 values cannot become 3 x 2
        outputs = keras.layers.Dense(10)(keras.layers.Flatten()(x))
        model = keras.Model(inputs, outputs)
        """,
    good="""
        import keras

        inputs = keras.Input((4,))
        x = keras.layers.Reshape((2, 2))(inputs)
        outputs = keras.layers.Dense(10)(keras.layers.Flatten()(x))
        model = keras.Model(inputs, outputs)
        """,
    fix="No autofix: the message names the exception and the line to look at.",
)
raised_by_engine("run_failed", "MP001")

define_rule(
    "MP002",
    "unused-suppression",
    "info",
    "S",
    True,
    summary="A `# noqa: MPxxx` / `# mpdoctor: ignore[MPxxx]` comment that suppressed nothing.",
    what="""
        A suppression comment names a code that was not reported on that line (or, for `ignore-file`, anywhere in
        the file). Codes of rules that did not run (disabled, or trace-only rules under `--no-trace`) are not
        reported, since another run may need them. A bare `# noqa` or `# noqa: E501` belongs to other linters
        and is left alone.
        """,
    why="""
        Stale suppressions hide future findings on that line: when the code changes and the problem comes back,
        nobody is told.
        """,
    bad="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10, activation="softmax", dtype="float32"),  # noqa: MP401
        ])
        """,
    good="""
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10, activation="softmax", dtype="float32"),
        ])
        """,
    fix="Removes the comment when it holds only unused MP codes and nothing else (safe).",
)


# ------------------------------------------------------------------------------------------------- MP002


@unused_suppressions_check("MP002")
def unused_suppressions(suppressions, shown: str, text: str, could_have_run: Callable[[str], bool]) -> list[Diagnostic]:
    """A suppression comment naming codes that were not reported on its line (and could have been)."""
    if not suppressions:
        return []
    found = []
    lines = source_lines(text)
    for s in suppressions:
        if ALL in s.codes:
            unused = () if s.used else ("all codes",)
        else:
            # A code whose rule cannot run in these passes (or is disabled) may be needed by another run: keep quiet.
            unused = tuple(c for c in s.codes if c not in s.used and could_have_run(c))
        if not unused:
            continue
        fix = None
        if ALL not in s.codes and len(unused) == len(s.codes) and s.only_ours:
            fix = _remove_comment_fix(shown, lines, s)
        found.append(
            Diagnostic(
                code="MP002",
                message=f"unused suppression ({', '.join(unused)}): nothing here was reported",
                location=Location(shown, s.line, s.column, s.line, s.end_column),
                severity=get_rule("MP002").severity,
                passes=("static",),
                fix=fix,
            )
        )
    return found


def _remove_comment_fix(shown: str, lines: list[str], s) -> Fix:
    line_text = lines[s.line - 1]
    start = s.column - 1
    while start > 0 and line_text[start - 1] in " \t":
        start -= 1
    if line_text[:start].strip() == "":
        edit = Edit(shown, s.line, 1, s.line + 1, 1, "")  # the comment is the whole line
    else:
        edit = Edit(shown, s.line, start + 1, s.line, len(line_text) + 1, "")
    return Fix("remove the unused suppression comment", (edit,))
