"""MP0xx: the run itself."""

from mpdoctor.registry import define_rule

define_rule(
    "MP001", "trace-failed", "error", "T", False,
    summary="Importing the file or building/calling the model raised, and no other rule explains it.",
    what="""
        The trace pass imports the model file in a child process and builds and calls every model it finds. When
        that raises (or the child crashes or times out) and no more specific rule explains the exception, MP001
        reports the exception type, its message and the frame in your file that raised it.
        """,
    why="""
        A model that cannot be built cannot be checked: every trace-based rule was skipped for it. Static findings
        for the file are still reported.
        """,
    bad="""
        model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(None,))])
        model.build((None, 3, 4, 5))   # raises while building
        """,
    good="""
        model = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(10)])
        """,
    fix="No autofix: the message names the exception and the line to look at.",
)

define_rule(
    "MP002", "unused-suppression", "info", "S", True,
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
        out = tf.keras.layers.Dense(10, activation="softmax", dtype="float32")(x)  # noqa: MP401
        """,
    good="""
        out = tf.keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
        """,
    fix="Removes the comment when it holds only unused MP codes and nothing else (safe).",
)
