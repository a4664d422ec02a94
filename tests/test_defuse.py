"""The def-use guard (mpdoctor/static/defuse.py): reads of a scope's names that some path reaches unassigned, and
autofix refusing a fix that adds one."""

from __future__ import annotations

import ast
import textwrap

from mpdoctor.static.defuse import describe, introduced_undefined_reads, undefined_reads


def _reads(source: str) -> list[tuple[str, str]]:
    return [(r.scope, r.name) for r in undefined_reads(ast.parse(textwrap.dedent(source)))]


def test_a_name_assigned_in_one_arm_only_is_undefined_after_the_if():
    assert _reads(
        """
        def step(fp16):
            if fp16:
                scaled = 2
            return scaled
        """
    ) == [("step", "scaled")]


def test_both_arms_loops_and_returning_arms():
    assert not _reads(
        """
        def step(fp16, items):
            if fp16:
                a = 1
            else:
                a = 2
            if not fp16:
                return a
            else:
                b = a
            for item in items:
                c = item
            with open(b) as handle:
                d = handle
            return a, b, d
        """
    )
    assert _reads(
        """
        def step(items):
            for item in items:
                c = item
            return c, item
        """
    ) == [("step", "c"), ("step", "item")]


def test_globals_closures_comprehensions_and_lambdas_are_not_judged():
    assert not _reads(
        """
        import tensorflow as tf

        def step(grads):
            clipped = [tf.clip_by_norm(g, 1.0) for g in grads]
            later = lambda: undefined_until_called
            undefined_until_called = 1
            return clipped, model, later

        model = 1
        """
    )


def test_try_handlers_may_start_before_the_body_ran():
    assert _reads(
        """
        def load():
            try:
                value = compute()
            except ValueError:
                pass
            return value
        """
    ) == [("load", "value")]
    assert not _reads(
        """
        try:
            import horovod
        except ImportError:
            horovod = None
        print(horovod)
        """
    )


def test_methods_are_scopes_of_their_own():
    assert _reads(
        """
        class Trainer:
            def train_step(self, fp16):
                if fp16:
                    scaled = 1
                return scaled
        """
    ) == [("Trainer.train_step", "scaled")]


def test_introduced_reads_ignore_what_the_original_already_had():
    before = ast.parse(
        textwrap.dedent(
            """
            def step(fp16, other):
                if fp16:
                    scaled = 1
                if other:
                    a = scaled
                else:
                    a = 0
                return a
            """
        )
    )
    after = ast.parse(ast.unparse(before).replace("a = 0", "a = scaled"))
    reads = introduced_undefined_reads(before, after)
    assert [(r.name, r.line) for r in reads] == [("scaled", 7)]
    assert describe(reads) == "`scaled` at line 7 (in step)"
    assert not introduced_undefined_reads(before, before)


STEP = """\
def train_step(fp16):
    with tape:
        loss = compute()
        if fp16:
            scaled_loss = scale(loss)
    if fp16:
        grads = gradient(scaled_loss)
    else:
        grads = gradient(loss)
    return grads
"""


def test_autofix_refuses_a_fix_that_reads_a_name_only_one_branch_assigns():
    from mpdoctor.diagnostics import Diagnostic, Edit, Fix, Location, Severity
    from mpdoctor.fix.rounds import plan_fixes

    def finding(line: int, column: int, end: int, new: str) -> Diagnostic:
        edit = Edit("m.py", line, column, line, end, new)
        return Diagnostic("MP502", "m", Location("m.py", line, column), Severity.ERROR, fix=Fix("rewrite", (edit,)))

    into_the_else_branch = finding(9, 26, 30, "scaled_loss")  # `gradient(loss)` of the float32 path
    harmless = finding(10, 12, 17, "list(grads)")
    fixed, applied, refused, _ = plan_fixes(STEP, [into_the_else_branch, harmless], lambda text: [], unsafe=True)
    assert [d for d, _ in applied] == [harmless]
    [(d, reason)] = refused
    assert d is into_the_else_branch
    assert reason == (
        "the fix would read `scaled_loss` at line 9 (in train_step), where it is not assigned on every path reaching it"
    )
    assert "gradient(loss)" in fixed and "return list(grads)" in fixed
