"""MP301 checkpoint-dtype-mismatch: checkpoint values restored into variables of another dtype."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mpdoctor.diagnostics import Confidence, Diagnostic, Fix
from mpdoctor.registry import (
    define_rule,
    exception_pattern,
    static_check,
    static_verdicts,
    trace_check,
    verdict_of,
)
from mpdoctor.static.astutil import keyword_value
from mpdoctor.static.context import FUNCTION_NODES, StaticContext
from mpdoctor.static.edits import after_imports, module_alias, policy_literal_fix
from mpdoctor.static.policies import POLICY_SETTERS, policy_from_expr
from mpdoctor.tf_messages import dtype_name
from mpdoctor.trace.context import TraceContext

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Facts

define_rule(
    "MP301",
    "checkpoint-dtype-mismatch",
    "error",
    "STA",
    True,
    summary="A checkpoint value's dtype differs from the variable it restores into (float32 checkpoint, float16 "
    "variables).",
    what="""
        A checkpoint restore where the stored values and the variables they restore into have different dtypes:
        TF2 object-based `tf.train.Checkpoint`, TF1 name-based `Saver`, Keras `.h5`, `.weights.h5`, `.keras`.
        The artifact and trace passes read the checkpoint and report each variable: key, checkpoint dtype,
        variable dtype.

        The static pass cannot read the checkpoint, so it reports (confidence medium) the restores that fail
        when the checkpoint holds float32 values, the usual case:
        - TF1: `Saver(...).restore(sess, path)` in a graph that creates float16/bfloat16 variables
          (`get_variable(..., dtype=tf.float16)`, `tf.Variable(..., dtype=tf.float16)`,
          `tf.compat.v1.layers.dense` on a float16 tensor, a `variable_scope(dtype=tf.float16)`). "Same graph":
          the same function or module since the last `reset_default_graph()`, or the same
          `with tf.Graph().as_default():` block. Reported at the Saver constructor.
        - TF2: `tf.train.Checkpoint(model=model).restore(path)` / `.read(path)`, and tf_keras
          `model.load_weights(path)` of TF-format weights, while the pure `float16` / `bfloat16` policy is in
          force (the model's variables are then float16).
        Not reported: a Saver with `builder=` (a cast-on-restore builder), a restore of a checkpoint the same file
        saved from float16 variables, `mixed_float16` / `mixed_bfloat16` (variables stay float32), tf_keras
        `.h5` and Keras 3 `.weights.h5` / `.keras` files (they cast silently: MP302/MP303 audit the values).
        """,
    why="""
        Restores read each tensor with the dtype of the variable it goes into and do not cast: a float32 value for
        a float16 variable fails with "tensor_name = dense/kernel; expected dtype half does not equal original
        dtype float". Pure float16 policies and hand-written float16 TF1 graphs hit this with every pretrained
        float32 checkpoint.
        """,
    bad="""
        import keras
        import tensorflow as tf

        def build_model():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

        tf.train.Checkpoint(model=build_model()).write("pretrained/ckpt")   # float32 values

        keras.mixed_precision.set_global_policy("float16")   # float16 variables
        model = build_model()
        tf.train.Checkpoint(model=model).read("pretrained/ckpt")   # fails: float32 values into float16 variables
        """,
    good="""
        import keras
        import tensorflow as tf

        def build_model():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

        tf.train.Checkpoint(model=build_model()).write("pretrained/ckpt")   # float32 values

        keras.mixed_precision.set_global_policy("mixed_float16")   # float32 variables, float16 compute
        model = build_model()
        tf.train.Checkpoint(model=model).read("pretrained/ckpt")
        # or convert the checkpoint once: mpdoctor convert-checkpoint pretrained/ckpt ckpt16/ckpt --dtype float16
        """,
    fix="""
        TF1 `Saver`: `--fix` adds a `CastOnRestoreSaverBuilder` class (a `BaseSaverBuilder` whose `bulk_restore`
        reads float16/bfloat16 variables' values as float32 with `io_ops.restore_v2` and `tf.cast`s them) after
        the file's imports, once, and passes `builder=CastOnRestoreSaverBuilder()` to the Saver. Safe when the
        trace saw the restore fail on float32 values; unsafe from the static pass alone (a checkpoint that already
        holds float16 values would then fail). TF2 `Checkpoint` restores and tf_keras TF-format `load_weights`
        under a pure `float16` policy: `--fix --unsafe-fixes` switches the policy to `mixed_float16` (float32
        variables, so the float32 values restore; unsafe: the variables' dtype changes). No cast-on-restore code
        is generated for them; the alternative is converting the checkpoint once
        (`mpdoctor convert-checkpoint IN OUT --dtype float16`).
        """,
)


_SAVERS = ("tf.train.Saver", "tf.compat.v1.train.Saver")
_CHECKPOINTS = ("tf.train.Checkpoint", "tf.compat.v1.train.Checkpoint", "tf.train.CheckpointV1")
_MANAGERS = ("tf.train.CheckpointManager",)
_RESETS = ("tf.reset_default_graph", "tf.compat.v1.reset_default_graph")
_GRAPHS = ("tf.Graph", "tf.compat.v1.Graph")
_GET_VARIABLE = ("tf.get_variable", "tf.compat.v1.get_variable")
_VARIABLE = ("tf.Variable", "tf.compat.v1.Variable", "tf.compat.v1.VariableV1")
_VARIABLE_SCOPES = ("tf.variable_scope", "tf.compat.v1.variable_scope")
_TF1_LAYER_PREFIXES = ("tf.layers.", "tf.compat.v1.layers.")
_TENSOR_MAKERS = (
    "tf.cast",
    "tf.compat.v1.placeholder",
    "tf.placeholder",
    "tf.zeros",
    "tf.ones",
    "tf.constant",
    "tf.fill",
    "tf.random.normal",
    "tf.random.uniform",
    "tf.compat.v1.random_normal",
    "tf.compat.v1.placeholder_with_default",
    "tf.convert_to_tensor",
)
_H5_SUFFIXES = (".h5", ".hdf5", ".keras", ".weights.h5")
_LOW = ("float16", "bfloat16")
# Objects whose variables are not (known to be) float16: plain variables, optimizers, data iterators, and loaded models
# (a loaded Keras model keeps the dtype policies it was saved with, whatever the global policy).
_NOT_MODELS = (
    "tf.Variable",
    "tf.constant",
    "tf.data.",
    "keras.optimizers.",
    "tf.train.",
    "tf.compat.v1.train.",
    "keras.models.load_model",
    "keras.saving.load_model",
    "tf.saved_model.",
    "hub.",
)


def _name(ctx: StaticContext, call: ast.AST) -> str | None:
    """Canonical name of a call's function with `tf.compat.v1.` spelled `tf.` (`import tensorflow.compat.v1 as tf`)."""
    name = ctx.call_name(call) if isinstance(call, ast.Call) else None
    if name and name.startswith("tf.compat.v1."):
        return "tf." + name[len("tf.compat.v1.") :]
    return name


def _resolved_value(ctx: StaticContext, expr: ast.AST, at: ast.AST) -> ast.AST:
    """Follow a name to the value it was last assigned (same scope, then module constants)."""
    for _ in range(6):
        if not isinstance(expr, ast.Name):
            return expr
        value = ctx.last_assignment(expr.id, at)
        if value is None:
            value = ctx.module_constants.get(expr.id)
        if value is None:
            return expr
        expr = value
    return expr


def _low_dtype(ctx: StaticContext, expr: ast.AST | None, at: ast.AST) -> str | None:
    """'float16' / 'bfloat16' when `expr` denotes such a dtype (`tf.float16`, `"float16"`, `tf.half`, a name)."""
    if expr is None:
        return None
    expr = _resolved_value(ctx, expr, at)
    dtype = policy_from_expr(expr, ctx.imports, ctx.module_constants)
    return dtype if dtype in _LOW else None


def _graph_container(ctx: StaticContext, node: ast.AST) -> ast.AST:
    """The innermost `with <tf.Graph()>.as_default():` block, function or module holding `node`."""
    current = ctx.parents.get(node)
    while current is not None:
        if isinstance(current, ast.With) and any(
            _is_graph_context(ctx, item.context_expr, current) for item in current.items
        ):
            return current
        if isinstance(current, FUNCTION_NODES):
            return current
        current = ctx.parents.get(current)
    return ctx.tree


def _is_graph_context(ctx: StaticContext, expr: ast.AST, at: ast.AST) -> bool:
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "as_default"):
        return False
    graph = _resolved_value(ctx, expr.func.value, at)
    return isinstance(graph, ast.Call) and _name(ctx, graph) in _GRAPHS


def _graph_key(ctx: StaticContext, node: ast.AST) -> tuple[ast.AST, int]:
    """Which TF1 graph `node` builds into: its container plus how many reset_default_graph() came before it."""
    container = _graph_container(ctx, node)
    resets = sum(
        1
        for call in ctx.calls_named(*_RESETS)
        if _graph_container(ctx, call) is container and call.lineno < node.lineno
    )
    return container, resets


def _in_custom_getter_scope(ctx: StaticContext, node: ast.AST) -> bool:
    """Inside `with variable_scope(..., custom_getter=...)`: float32 master weights cast on read (NVIDIA recipe)."""
    current = ctx.parents.get(node)
    while current is not None and not isinstance(current, FUNCTION_NODES):
        if isinstance(current, ast.With):
            for item in current.items:
                expr = item.context_expr
                if (
                    isinstance(expr, ast.Call)
                    and _name(ctx, expr) in _VARIABLE_SCOPES
                    and keyword_value(expr, "custom_getter") is not None
                ):
                    return True
        current = ctx.parents.get(current)
    return False


def _scope_dtype(ctx: StaticContext, node: ast.AST) -> str | None:
    """The dtype of an enclosing `with variable_scope(..., dtype=tf.float16)`."""
    current = ctx.parents.get(node)
    while current is not None and not isinstance(current, FUNCTION_NODES):
        if isinstance(current, ast.With):
            for item in current.items:
                expr = item.context_expr
                if isinstance(expr, ast.Call) and _name(ctx, expr) in _VARIABLE_SCOPES:
                    dtype = _low_dtype(ctx, keyword_value(expr, "dtype"), expr)
                    if dtype:
                        return dtype
        current = ctx.parents.get(current)
    return None


def _low_tensor(ctx: StaticContext, expr: ast.AST | None, at: ast.AST, depth: int = 0) -> str | None:
    """The low dtype of a TF1 tensor expression, when the source shows it."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at)
        return _low_tensor(ctx, value, at, depth + 1) if value is not None else None
    if not isinstance(expr, ast.Call):
        return None
    made = _low_variable(ctx, expr)
    if made:
        return made
    name = _name(ctx, expr) or ""
    if name in _TENSOR_MAKERS:
        dtype_arg = keyword_value(expr, "dtype")
        if (
            dtype_arg is None
            and len(expr.args) > 1
            and name in ("tf.cast", "tf.zeros", "tf.ones", "tf.constant", "tf.convert_to_tensor")
        ):
            dtype_arg = expr.args[1]
        if dtype_arg is None and expr.args and "placeholder" in name:
            dtype_arg = expr.args[0]
        return _low_dtype(ctx, dtype_arg, expr)
    if name.startswith(_TF1_LAYER_PREFIXES) and name.rsplit(".", 1)[-1][:1].islower():
        inputs = expr.args[0] if expr.args else keyword_value(expr, "inputs")
        return _low_tensor(ctx, inputs, at, depth + 1)
    if name in ("tf.matmul", "tf.nn.relu", "tf.add", "tf.nn.bias_add", "tf.reshape", "tf.identity"):
        return _low_tensor(ctx, expr.args[0] if expr.args else None, at, depth + 1)
    return None


def _low_variable(ctx: StaticContext, call: ast.Call) -> str | None:
    """'float16'/'bfloat16' when `call` creates a TF1 variable of that dtype."""
    name = _name(ctx, call)
    if name in _GET_VARIABLE:
        if _in_custom_getter_scope(ctx, call):
            return None
        dtype_arg = keyword_value(call, "dtype")
        if dtype_arg is None and len(call.args) > 2:
            dtype_arg = call.args[2]
        return _low_dtype(ctx, dtype_arg, call) if dtype_arg is not None else _scope_dtype(ctx, call)
    if name in _VARIABLE:
        dtype_arg = keyword_value(call, "dtype")
        if dtype_arg is None:
            initial = call.args[0] if call.args else keyword_value(call, "initial_value")
            return _low_tensor(ctx, initial, call, 1) if isinstance(initial, ast.Call) else None
        return _low_dtype(ctx, dtype_arg, call)
    if name and name.startswith(_TF1_LAYER_PREFIXES) and name.rsplit(".", 1)[-1][:1].islower():
        inputs = call.args[0] if call.args else keyword_value(call, "inputs")
        return _low_tensor(ctx, inputs, call, 1)
    return None


def _variable_label(ctx: StaticContext, call: ast.Call) -> str:
    name = keyword_value(call, "name")
    if name is None and _name(ctx, call) in _GET_VARIABLE and call.args:
        name = call.args[0]
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        return repr(name.value)
    return ctx.segment(call.func).rsplit(".", 1)[-1] + "(...)"


def _float16_graphs(ctx: StaticContext) -> dict[tuple[ast.AST, int], tuple[str, list[str]]]:
    """TF1 graph key -> (low dtype, labels of the low-precision variables created in it)."""
    graphs: dict[tuple[ast.AST, int], tuple[str, list[str]]] = {}
    functions: dict[str, tuple[str, list[str]]] = {}
    for call in ctx.calls:
        dtype = _low_variable(ctx, call)
        if not dtype:
            continue
        key = _graph_key(ctx, call)
        entry = graphs.setdefault(key, (dtype, []))
        entry[1].append(_variable_label(ctx, call))
        if isinstance(key[0], FUNCTION_NODES):
            functions.setdefault(key[0].name, (dtype, []))[1].append(_variable_label(ctx, call))
    # a graph that calls a local builder function creating float16 variables holds them too
    for call in ctx.calls:
        if isinstance(call.func, ast.Name) and call.func.id in functions:
            key = _graph_key(ctx, call)
            if key not in graphs:
                dtype, labels = functions[call.func.id]
                graphs[key] = (dtype, [f"{call.func.id}(): {', '.join(labels)}"])
    return graphs


def _path_key(ctx: StaticContext, expr: ast.AST | None, at: ast.AST, depth: int = 0) -> tuple:
    """A comparable description of a checkpoint path expression."""
    if expr is None or depth > 6:
        return ("none",)
    if isinstance(expr, ast.Constant):
        return ("str", expr.value)
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at) or ctx.module_constants.get(expr.id)
        return _path_key(ctx, value, at, depth + 1) if value is not None else ("name", expr.id)
    if isinstance(expr, ast.Attribute) and expr.attr == "latest_checkpoint":
        return ("latest", ("manager", ctx.segment(expr.value)))
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "latest_checkpoint":
            directory = expr.args[0] if expr.args else keyword_value(expr, "checkpoint_dir")
            return ("latest", ("dir", _path_key(ctx, directory, at, depth + 1)))
        if (_name(ctx, expr) or "").endswith("path.join") and expr.args:
            parts = [_path_key(ctx, a, at, depth + 1) for a in expr.args]
            if all(p[0] == "str" and isinstance(p[1], str) for p in parts):
                return ("str", "/".join(p[1].rstrip("/") for p in parts))
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("save", "write"):
            return ("saved", expr)
    return ("text", ast.dump(expr))


def _path_suffix(ctx: StaticContext, expr: ast.AST | None, at: ast.AST, depth: int = 0) -> str | None:
    """The literal end of a path expression (`"w.h5"`, f"{d}/w.h5", os.path.join(d, "ckpt")), or None."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr) and expr.values and isinstance(expr.values[-1], ast.Constant):
        return str(expr.values[-1].value)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _path_suffix(ctx, expr.right, at, depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):  # pathlib: d / "w.h5"
        return _path_suffix(ctx, expr.right, at, depth + 1)
    if isinstance(expr, ast.Call) and expr.args and (_name(ctx, expr) or "").endswith(("path.join", "Path")):
        return _path_suffix(ctx, expr.args[-1], at, depth + 1)
    if isinstance(expr, ast.Name):
        value = ctx.last_assignment(expr.id, at) or ctx.module_constants.get(expr.id)
        return _path_suffix(ctx, value, at, depth + 1) if value is not None else None
    return None


def _receiver_call(ctx: StaticContext, call: ast.Call, names: tuple[str, ...]) -> ast.Call | None:
    """For `obj.method(...)`, the constructor call of `obj` when it is one of `names`."""
    if not isinstance(call.func, ast.Attribute):
        return None
    obj = _resolved_value(ctx, call.func.value, call)
    if isinstance(obj, ast.Call) and _name(ctx, obj) in names:
        return obj
    if isinstance(obj, ast.Attribute) and isinstance(obj.value, ast.Name) and obj.value.id == "self":
        value = ctx.self_attribute(obj, obj.attr)
        if isinstance(value, ast.Call) and _name(ctx, value) in names:
            return value
    return None


def _method_calls(ctx: StaticContext, *methods: str) -> list[ast.Call]:
    return [c for c in ctx.calls if isinstance(c.func, ast.Attribute) and c.func.attr in methods]


def _describe_path(ctx: StaticContext, expr: ast.AST | None) -> str:
    text = ctx.segment(expr) if expr is not None else ""
    return text if text and len(text) <= 60 and "\n" not in text else "the checkpoint"


def mismatch(variable_dtype: str, checkpoint_dtype: str = "float32") -> str:
    """MP301's fact in the words of both passes."""
    tf_name = {"float16": "half", "float32": "float", "float64": "double"}
    return (
        f"the restore does not cast, so {checkpoint_dtype} checkpoint values fail with "
        f'"expected dtype {tf_name.get(variable_dtype, variable_dtype)} does not equal original dtype '
        f'{tf_name.get(checkpoint_dtype, checkpoint_dtype)}"'
    )


def advice(kind: str, dtype: str) -> str:
    """What to do, by the kind of restore ("saver", "checkpoint", "load_weights"), in the words of both passes."""
    convert = f"convert the checkpoint first: `mpdoctor convert-checkpoint IN OUT --dtype {dtype}`"
    if kind == "saver":
        return f"restore through a cast (a Saver `builder=` whose bulk_restore reads float32 and tf.casts) or {convert}"
    if kind == "load_weights":
        return f'use "mixed_{dtype}" (float32 variables), load an .h5 file (cast on load), or {convert}'
    return f'use "mixed_{dtype}" (float32 variables) or {convert}'


def _tf1_saver_restores(ctx: StaticContext) -> list[Diagnostic]:
    graphs = _float16_graphs(ctx)
    if not graphs:
        return []
    saves = []  # (path key, save call) of Savers saving from a float16 graph
    for call in _method_calls(ctx, "save"):
        saver = _receiver_call(ctx, call, _SAVERS)
        if saver is None:
            continue
        if _graph_key(ctx, saver) in graphs:
            path = call.args[1] if len(call.args) > 1 else keyword_value(call, "save_path")
            saves.append((_path_key(ctx, path, call), call))
    found = []
    for call in _method_calls(ctx, "restore"):
        saver = _receiver_call(ctx, call, _SAVERS)
        if (
            saver is None
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Call)
            and _name(ctx, call.func.value) in _SAVERS
        ):
            saver = call.func.value
        if saver is None:
            continue
        if keyword_value(saver, "builder") is not None:
            continue
        key = _graph_key(ctx, saver)
        if key not in graphs:
            continue
        path = call.args[1] if len(call.args) > 1 else keyword_value(call, "save_path")
        path_key = _path_key(ctx, path, call)
        if _own_checkpoint(path_key, saves):
            continue
        dtype, labels = graphs[key]
        shown = ", ".join(labels[:3]) + (", ..." if len(labels) > 3 else "")
        found.append(
            ctx.diagnostic(
                "MP301",
                saver,
                f"this Saver restores {_describe_path(ctx, path)} into a graph with {dtype} variables ({shown}): "
                f"{mismatch(dtype)}; {advice('saver', dtype)}",
                confidence=Confidence.MEDIUM,
                # unsafe: the source does not say the checkpoint holds float32 values (the trace can: its fix is safe)
                fix=saver_builder_fix(ctx, saver, "unsafe"),
            )
        )
    return found


def _own_checkpoint(path_key: tuple, saves: list[tuple[tuple, ast.Call]]) -> bool:
    """True when the restored path is one this file saved from low-precision variables."""
    if path_key[0] == "saved":
        return any(call is path_key[1] for _, call in saves)
    if path_key[0] == "latest":
        where = path_key[1]
        if where[0] == "manager":
            return any(key == where for key, _ in saves)
        directory = where[1]
        if directory[0] != "str":
            return bool(saves)  # a directory we cannot read: it may well be the one saved to
        return any(
            key == ("dir", directory)
            or _inside(key, directory[1])
            or key[0] in ("name", "text", "none")
            or (key[0] == "dir" and key[1][0] != "str")
            for key, _ in saves
        )
    return any(key == path_key for key, _ in saves)


def _inside(key: tuple, directory) -> bool:
    return (
        key[0] == "str"
        and isinstance(key[1], str)
        and isinstance(directory, str)
        and key[1].startswith(directory.rstrip("/") + "/")
    )


def _pure_low(policies: Iterable[str | None]) -> set[str]:
    return {p for p in policies if p in _LOW}


def _object_policies(ctx: StaticContext, obj: ast.AST, at: ast.AST) -> frozenset | None:
    """Policies in force when a checkpointed object (model, layer) was constructed; None when it is not a model."""
    value = _resolved_value(ctx, obj, at)
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        value = ctx.self_attribute(value, value.attr) or value
    if isinstance(value, ast.Call):
        name = _name(ctx, value) or ""
        if name.startswith(_NOT_MODELS) or (isinstance(value.func, ast.Name) and value.func.id in ("iter", "dict")):
            return None
        layer = ctx.layer_call(value)
        if layer is not None:
            return ctx.layer_policies(layer)
        return ctx.policies_at(value)
    if isinstance(value, (ast.Constant, ast.Dict, ast.List)):
        return None
    return frozenset()  # unknown object: judge by the policy at the restore


def _checkpoint_policies(ctx: StaticContext, checkpoint: ast.Call, at: ast.AST) -> frozenset:
    result: set = set()
    saw_model = False
    for kw in checkpoint.keywords:
        if kw.arg is None:
            continue
        policies = _object_policies(ctx, kw.value, checkpoint)
        if policies is None:
            continue
        saw_model = True
        result |= policies or ctx.policies_at(at)
    for arg in checkpoint.args:  # tf.compat.v1.train.Checkpoint / positional root
        policies = _object_policies(ctx, arg, checkpoint)
        if policies is not None:
            saw_model = True
            result |= policies or ctx.policies_at(at)
    return frozenset(result) if saw_model else frozenset()


def _tf2_saves(ctx: StaticContext) -> list[tuple[tuple, ast.Call]]:
    """Checkpoints this file writes while a pure float16/bfloat16 policy is in force."""
    saves = []
    for call in _method_calls(ctx, "save", "write"):
        checkpoint = _receiver_call(ctx, call, _CHECKPOINTS)
        manager = _receiver_call(ctx, call, _MANAGERS)
        if checkpoint is not None:
            if _pure_low(_checkpoint_policies(ctx, checkpoint, call) or ctx.policies_at(call)):
                saves.append((_path_key(ctx, call.args[0] if call.args else None, call), call))
        elif manager is not None and _pure_low(ctx.policies_at(call)):
            directory = manager.args[1] if len(manager.args) > 1 else keyword_value(manager, "directory")
            saves.append((("manager", ctx.segment(call.func.value)), call))  # type: ignore[attr-defined]
            saves.append((("dir", _path_key(ctx, directory, manager)), call))
    for call in _method_calls(ctx, "save_weights"):
        if _pure_low(ctx.policies_at(call)):
            saves.append((_path_key(ctx, call.args[0] if call.args else None, call), call))
    for call in ctx.calls_named("keras.callbacks.ModelCheckpoint"):
        if _pure_low(ctx.policies_at(call)):
            saves.append((_path_key(ctx, call.args[0] if call.args else keyword_value(call, "filepath"), call), call))
    return saves


def _tf2_restores(ctx: StaticContext) -> list[Diagnostic]:
    if not any(p in _LOW for p in (*(e.policy for e in ctx.policy_events), ctx.settings.assumed_policy)):
        return []
    saves = _tf2_saves(ctx)
    found = []
    for call in _method_calls(ctx, "restore", "read"):
        checkpoint = _receiver_call(ctx, call, _CHECKPOINTS)
        if (
            checkpoint is None
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Call)
            and _name(ctx, call.func.value) in _CHECKPOINTS
        ):
            checkpoint = call.func.value
        if checkpoint is None:
            continue
        policies = _checkpoint_policies(ctx, checkpoint, call)
        low = _pure_low(policies)
        if not low:
            continue
        path = call.args[0] if call.args else keyword_value(call, "save_path")
        if _own_checkpoint(_path_key(ctx, path, call), saves):
            continue
        policy = sorted(low)[0]
        confidence = Confidence.MEDIUM if low == set(policies) else Confidence.LOW
        found.append(
            ctx.diagnostic(
                "MP301",
                call,
                f"tf.train.Checkpoint {call.func.attr}s {_describe_path(ctx, path)} into a model built under "  # type: ignore[attr-defined]
                f'policy "{policy}", whose variables are {policy}: {mismatch(policy)}; {advice("checkpoint", policy)}',
                confidence=confidence,
                fix=_mixed_policy_fix(ctx, policy),
            )
        )
    if ctx.is_keras3:
        return found  # Keras 3 load_weights only reads .keras / .weights.h5 / .h5, which cast silently
    for call in _method_calls(ctx, "load_weights"):
        path = call.args[0] if call.args else keyword_value(call, "filepath")
        suffix = _path_suffix(ctx, path, call)
        if suffix is None or suffix.lower().endswith(_H5_SUFFIXES):
            continue
        model = call.func.value  # type: ignore[attr-defined]
        policies = _object_policies(ctx, model, call)
        if policies is None:
            continue
        policies = policies or ctx.policies_at(call)
        low = _pure_low(policies)
        if not low or _own_checkpoint(_path_key(ctx, path, call), saves):
            continue
        policy = sorted(low)[0]
        confidence = Confidence.MEDIUM if low == set(policies) else Confidence.LOW
        found.append(
            ctx.diagnostic(
                "MP301",
                call,
                f"load_weights() of TF-format weights ({_describe_path(ctx, path)}) into a model built under "
                f'policy "{policy}", whose variables are {policy}: {mismatch(policy)}; '
                + advice("load_weights", policy),
                confidence=confidence,
                fix=_mixed_policy_fix(ctx, policy),
            )
        )
    return found


def _mixed_policy_fix(ctx: StaticContext, policy: str) -> Fix | None:
    """`"float16"` -> `"mixed_float16"` at the one place the file sets that policy: the model's variables become
    float32 and restore float32 values. Unsafe: it changes the variables' dtype (and what the file saves)."""
    events = [e for e in ctx.policy_events if e.policy == policy]
    if any(POLICY_SETTERS.get(ctx.call_name(e.node)) for e in events):
        return None  # set_floatx takes no "mixed_" policy: MP102's fix rewrites that call
    fix = policy_literal_fix(ctx, events[0], f"mixed_{policy}") if len(events) == 1 else None
    if fix is None:
        return None
    return Fix(
        f"build the model under 'mixed_{policy}' (float32 variables restore float32 values)",
        fix.edits,
        applicability="unsafe",
    )


@static_check("MP301", requires=r"restore|read|load_weights")  # each finding is one of these method calls
def check_checkpoint_dtype(ctx: StaticContext) -> Iterable[Diagnostic]:
    return [*_tf1_saver_restores(ctx), *_tf2_restores(ctx)]


@trace_check("MP301")
def trace_checkpoint_dtype_mismatch(facts: Facts, ctx: TraceContext) -> Iterable[Diagnostic]:
    """A restore the trace recorded failed because checkpoint values and variables differ in dtype: one finding per
    restore call, listing each variable (key, checkpoint dtype, variable dtype)."""
    found = []
    for restore in facts.restores:
        error = restore.error
        verdict = verdict_of(error)
        if not verdict or verdict["code"] != "MP301":
            continue
        tensors = verdict.get("tensors") or []
        listed = "; ".join(
            f"{t['name']}: checkpoint {t['checkpoint_dtype']}, variable {t['variable_dtype']}" for t in tensors[:6]
        )
        more = f" and {len(tensors) - 6} more" if len(tensors) > 6 else ""
        where = restore.anchor  # a Saver's builder= goes where the Saver was created
        saver = ctx.call_at(where.line if where else None, "Saver") if restore.receiver_created_at else None
        fix = None
        if (
            saver is not None
            and ctx.static is not None
            and tensors
            and all(t["checkpoint_dtype"] == "float32" and t["variable_dtype"] in _LOW for t in tensors)
        ):
            fix = saver_builder_fix(ctx.static, saver, "safe")
        variable_dtype = verdict.get("variable_dtype") or "float16"
        checkpoint_dtypes = {t["checkpoint_dtype"] for t in tensors}
        checkpoint_dtype = checkpoint_dtypes.pop() if len(checkpoint_dtypes) == 1 else "float32"
        kind = "saver" if "Saver" in restore.api else "load_weights" if "load_weights" in restore.api else "checkpoint"
        found.append(
            ctx.diagnostic(
                "MP301",
                where,
                f"{restore.call_text} failed ({listed}{more}): {mismatch(variable_dtype, checkpoint_dtype)}; "
                + advice(kind, variable_dtype),
                fix=fix,
            )
        )
    return found


@static_verdicts("MP301")
def restores_that_completed(facts: Facts, ctx: TraceContext) -> dict:
    """A restore the static pass expected to fail on dtypes that the run completed without error: withdrawn."""
    cleared = {}
    for restore in facts.restores:
        if restore.error is None:
            for where in (restore.location, restore.receiver_created_at):
                if where and ctx.shown(where.file) == ctx.display_path:
                    cleared[("MP301", where.line)] = None
    return cleared


_RESTORE_DTYPE = re.compile(r"tensor_name = (\S+?); expected dtype (\w+) does not equal original dtype (\w+)")


@exception_pattern("MP301", order=20)
def restore_dtype_message(message: str) -> dict | None:
    """ "tensor_name = dense/kernel; expected dtype half does not equal original dtype float": {"tensors":
    [{"name", "variable_dtype", "checkpoint_dtype"}], "variable_dtype", "checkpoint_dtype"} (first tensor's)."""
    tensors, seen = [], set()
    for name, expected, original in _RESTORE_DTYPE.findall(message):
        if name in seen:
            continue
        seen.add(name)
        tensors.append({"name": name, "variable_dtype": dtype_name(expected), "checkpoint_dtype": dtype_name(original)})
    if not tensors:
        return None
    return {
        "tensors": tensors,
        "variable_dtype": tensors[0]["variable_dtype"],
        "checkpoint_dtype": tensors[0]["checkpoint_dtype"],
    }


# ---------------------------------------------------------------- the TF1 Saver fix

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
        tf = module_alias(ctx, *_TF_MODULES)
        base = module_alias(ctx, _BASE)
        lines = []
        if tf is None:
            tf = "tf" if "tf" not in aliases else "tensorflow"
            lines.append("import tensorflow as tf" if tf == "tf" else "import tensorflow")
        if base is None:
            base = "BaseSaverBuilder"
            lines.append(f"from tensorflow.python.training.saver import {base}")
        text = "".join(line + "\n" for line in lines) + _BUILDER_SOURCE.format(name=BUILDER_CLASS, base=base, tf=tf)
        insertion = after_imports(ctx, saver, text)
        if insertion is None:
            return None
        edits.append(insertion)
    return Fix(
        f"restore through a cast: Saver(builder={BUILDER_CLASS}()), a BaseSaverBuilder that reads "
        "float32 checkpoint values for float16/bfloat16 variables and casts them",
        tuple(sorted(edits, key=lambda e: (e.line, e.column))),
        applicability=applicability,
    )
