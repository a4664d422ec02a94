"""`check --fix` / `--diff` (and the write of `plan --fix`): apply the fix edits diagnostics carry, to a fixed point
(like ruff: non-conflicting fixes per round, re-check, repeat), verify the result (it parses; with the trace pass, the
fixed text is traced again without being written and must lose the fixed diagnostics without gaining an error), then
write it atomically. Never touches a file that changed since it was analysed, and never writes a result that does
not parse.

One module per job:
- apply.py: edits (data: mpdoctor.diagnostics.Edit) applied to text, and the unified diff; standard library only,
  the one module used outside the fix runs (the HTML report shows a fix as a diff, the plan writes its edits);
- simplify.py: the libcst clean-up of what mechanical edits leave (`x = x`, same-armed conditionals);
- rounds.py: one text's fixes round by round to a fixed point, each round guarded (parse, def-use);
- verify.py, step.py: the fixed text re-traced; a training fix's step compared with the float32 step;
- files.py: one file's fixes planned and verified; notebooks.py: a notebook's cell fixes, shown, never written;
- writing.py: the atomic write over the analysed text only; run.py: every file of a report;
- results.py: what --fix did to a file (the renderers read it as data, report/diff.py prints --diff).

Nothing here is imported by a static run without --fix/--diff (tests/test_lazy_imports.py).
"""
