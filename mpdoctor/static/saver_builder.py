"""MP301's fix for a TF1 Saver restoring float32 checkpoint values into float16/bfloat16 variables: a
`BaseSaverBuilder` subclass that reads them as float32 and casts, added to the file and passed as `builder=`."""

from __future__ import annotations

import ast

from mpdoctor.diagnostics import Fix
from mpdoctor.static.context import StaticContext
from mpdoctor.static.edits import after_imports, module_alias

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
    edits = list(ctx.add_keyword_fix(saver, "builder", f"{BUILDER_CLASS}()", "").edits)
    if BUILDER_CLASS not in ctx.classes:
        aliases = ctx.imports.aliases
        tf = module_alias(ctx.semantic, *_TF_MODULES)
        base = module_alias(ctx.semantic, _BASE)
        lines = []
        if tf is None:
            tf = "tf" if "tf" not in aliases else "tensorflow"
            lines.append("import tensorflow as tf" if tf == "tf" else "import tensorflow")
        if base is None:
            base = "BaseSaverBuilder"
            lines.append(f"from tensorflow.python.training.saver import {base}")
        text = "".join(line + "\n" for line in lines) + _BUILDER_SOURCE.format(name=BUILDER_CLASS, base=base, tf=tf)
        insertion = after_imports(ctx.semantic, saver, text)
        if insertion is None:
            return None
        edits.append(insertion)
    return Fix(
        f"restore through a cast: Saver(builder={BUILDER_CLASS}()), a BaseSaverBuilder that reads "
        "float32 checkpoint values for float16/bfloat16 variables and casts them",
        tuple(sorted(edits, key=lambda e: (e.line, e.column))),
        applicability=applicability,
    )
