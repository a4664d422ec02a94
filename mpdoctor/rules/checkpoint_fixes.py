"""MP301 source fix for a TF1 name-based `Saver`: a cast-on-restore `BaseSaverBuilder` (the accepted answer of the
second seed, generalised: only float16/bfloat16 variables read float32 values) added once to the module after its
imports, and `builder=` on the Saver. Plain edits: the static pass must not import libcst."""

from __future__ import annotations

import ast

from mpdoctor.diagnostics import Edit, Fix
from mpdoctor.static.context import StaticContext

BUILDER_CLASS = "CastOnRestoreSaverBuilder"
_BASE = "tensorflow.python.training.saver.BaseSaverBuilder"
_TF_MODULES = ("tensorflow", "tensorflow.compat.v1", "tensorflow.compat.v2")  # all have float32, cast, device

_BUILDER_SOURCE = '''

class {name}({base}):
    """Restores float16/bfloat16 variables from float32 checkpoint values and casts them (mpdoctor MP301 fix)."""

    def bulk_restore(self, filename_tensor, saveables, preferred_shard, restore_sequentially):
        from tensorflow.python.ops import io_ops

        specs = [spec for saveable in saveables for spec in saveable.specs]
        stored = [{tf}.float32 if spec.dtype in ({tf}.float16, {tf}.bfloat16) else spec.dtype for spec in specs]
        with {tf}.device("cpu:0"):
            restored = io_ops.restore_v2(filename_tensor, [spec.name for spec in specs],
                                         [spec.slice_spec for spec in specs], stored)
        return [{tf}.cast(value, spec.dtype) for value, spec in zip(restored, specs)]

'''


def saver_builder_fix(ctx: StaticContext, saver: ast.Call, applicability: str) -> Fix | None:
    """`builder=CastOnRestoreSaverBuilder()` on `saver`, plus the class (and its import) when the file lacks them."""
    anchor = _last_module_import(ctx, saver)
    if anchor is None:
        return None
    edits = list(ctx.add_keyword_fix(saver, "builder", f"{BUILDER_CLASS}()", "").edits)
    if BUILDER_CLASS not in ctx.classes:
        aliases = ctx.imports.aliases
        tf = next((name for name, target in aliases.items() if target in _TF_MODULES), None)
        base = next((name for name, target in aliases.items() if target == _BASE), None)
        lines = []
        if tf is None:
            tf = "tf" if "tf" not in aliases else "tensorflow"
            lines.append("import tensorflow as tf" if tf == "tf" else "import tensorflow")
        if base is None:
            base = "BaseSaverBuilder"
            lines.append(f"from tensorflow.python.training.saver import {base}")
        text = "".join(line + "\n" for line in lines) + _BUILDER_SOURCE.format(name=BUILDER_CLASS, base=base, tf=tf)
        newline = "\r\n" if "\r\n" in ctx.text else "\n"
        edits.append(Edit(ctx.display_path, anchor.end_lineno + 1, 1, anchor.end_lineno + 1, 1,
                          text.replace("\n", newline)))
    return Fix(f"restore through a cast: Saver(builder={BUILDER_CLASS}()), a BaseSaverBuilder that reads "
               "float32 checkpoint values for float16/bfloat16 variables and casts them",
               tuple(sorted(edits, key=lambda e: (e.line, e.column))), applicability=applicability)


def _last_module_import(ctx: StaticContext, before: ast.AST) -> ast.stmt | None:
    """The last top-level import statement above `before` that ends its line (nothing else after it)."""
    found = None
    for stmt in ctx.tree.body:
        if stmt.lineno >= before.lineno:
            break
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            found = stmt
    if found is None:
        return None
    rest = ctx.lines[found.end_lineno - 1][ctx.column(found.end_lineno, found.end_col_offset) - 1:]
    return found if not rest.strip() or rest.strip().startswith("#") else None
