"""The facts every static rule relies on: name resolution, Keras version, the policy in force at a point."""

import ast
import functools
import importlib.util
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from mpdoctor.static.context import StaticContext
from mpdoctor.static.semantic import Settings


def _ctx_of(source: str, directory: Path = Path(__file__).parent, **settings) -> StaticContext:
    """`directory`: where the file is; by default the tests folder, whose requirements.txt the fixtures' target is
    (not mpdoctor's own [tf] range)."""
    source = textwrap.dedent(source)
    return StaticContext(str(directory / "m.py"), "m.py", source, ast.parse(source), Settings(**settings))


ctx_of = _ctx_of


def _fixture_sources() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(Path(__file__).parent.glob("[df]*/**/*.py"))]


def _contexts(sources: list[str]) -> Iterator[StaticContext]:
    """A context of each source that parses."""
    for source in sources:
        try:
            yield ctx_of(source)
        except (SyntaxError, ValueError):
            continue


def call_on_line(ctx: StaticContext, line: int) -> ast.Call:
    return next(c for c in ctx.calls if c.lineno == line and ctx.layer_call(c))


@pytest.mark.parametrize(
    "source,expr,expected",
    [
        ("import tensorflow as tf", "tf.keras.layers.Dense", "keras.layers.Dense"),
        ("import tf_keras as keras", "keras.layers.Dense", "keras.layers.Dense"),
        ("import keras", "keras.layers.Dense", "keras.layers.Dense"),
        ("from tensorflow.keras import layers as L", "L.Dense", "keras.layers.Dense"),
        ("from tensorflow.keras.layers import Dense as D", "D", "keras.layers.Dense"),
        (
            "from tensorflow.keras import mixed_precision",
            "mixed_precision.set_global_policy",
            "keras.mixed_precision.set_global_policy",
        ),
        ("import tensorflow_hub as hub", "hub.KerasLayer", "hub.KerasLayer"),
        ("import tensorflow.compat.v1 as tf", "tf.train.Saver", "tf.compat.v1.train.Saver"),
        ("import tensorflow as tf", "undefined.Dense", None),
    ],
)
def test_resolve(source, expr, expected):
    ctx = ctx_of(source)
    assert ctx.resolve(ast.parse(expr, mode="eval").body) == expected


def test_imported_names_are_the_whole_chains_rooted_in_imports():
    """What MP103 looks for removed APIs in, instead of every node: each chain once, at its top, in source order;
    local names and the inner parts of a chain are not in it."""
    ctx = ctx_of(
        """
        import tensorflow as tf
        from tensorflow.keras import mixed_precision as mp
        tf.keras.layers.Dense(4)(x)
        mp.experimental.set_policy("mixed_float16")
        local.attr = tf
        tf.keras.layers.Dense = None
        """
    )
    assert [(n.lineno, ctx.segment(n), name) for n, name in ctx.imported_names()] == [
        (4, "tf.keras.layers.Dense", "keras.layers.Dense"),
        (5, "mp.experimental.set_policy", "keras.mixed_precision.experimental.set_policy"),
        (6, "tf", "tf"),
        (7, "tf.keras.layers.Dense", "keras.layers.Dense"),
    ]


def test_imported_names_through_parts_are_the_chains_that_name_one():
    ctx = ctx_of(
        """
        import tensorflow as tf
        from tensorflow.keras.mixed_precision import experimental as mpx
        tf.keras.layers.Dense(4)(x)
        tf.compat.v1.mixed_precision.experimental.LossScale
        mpx.Policy("mixed_float16")
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        """
    )
    assert [(n.lineno, name) for n, name in ctx.imported_names(frozenset({"experimental", "compat"}))] == [
        (5, "tf.compat.v1.mixed_precision.experimental.LossScale"),
        (6, "keras.mixed_precision.experimental.Policy"),
    ]


def test_layer_calls_are_every_call_layer_call_names_in_source_order():
    """layer_calls comes from the call indexes; it must be what asking layer_call of every call gives, also where a
    local class shadows an imported layer name."""
    shadowing = "from keras.layers import Dense\nimport keras\nclass Dense(keras.layers.Layer):\n    pass\nDense(3)\n"
    compared = 0
    for ctx in _contexts([shadowing, *_fixture_sources()]):
        expected = [layer for layer in map(ctx.layer_call, ctx.calls) if layer is not None]
        assert [layer.node for layer in ctx.layer_calls] == [layer.node for layer in expected]
        compared += bool(expected)
    assert compared >= 50


EVERY_FORM = """
import a.b as c
from .d import (e, f as g)
@dec(1)
class K(Base, metaclass=M, **kw):
    x: int = 1
    async def m(self, p, /, q=1, *args, r, s=2, **kwargs) -> "K":
        async with ctx() as (u, v), other():
            async for w in aiter():
                await w
        return [y async for y in z if y], {k: v for k, v in d.items()}, {**d, 1: 2}, {1, *s}
def gen(t=lambda a, *, b: a + b):
    global G
    yield from t
    del G[0], G.x
    while not (a < b <= c is not d) and -e or ~f:
        break
    else:
        pass
    try:
        raise E("x") from None
    except* (E, F) as err:
        assert err, f"{err!r:>{10}} {1 if a else 2}"
    finally:
        x = y = (z := 3)
        x[1:2:3] += 1
for i, *rest in pairs:
    continue
match point:
    case Point(x=0, y=0) | [1, 2, *others] | {"k": v, **more} if v > 0:
        pass
    case str() as s | None:
        pass
"""


def test_the_walk_finds_every_node_below_the_module_once_with_its_parent():
    """The context's one walk (child lists compiled per ast class from its signature) gives each node the parent
    ast.iter_child_nodes gives it, leaving out only the shared expression contexts and operators; on every kind
    of statement and expression, and the fixtures."""
    assert _walk_checked([EVERY_FORM, *_fixture_sources()]) > 100


def test_the_walk_finds_every_node_of_real_keras_files_once_with_its_parent(tensorflow):
    keras = importlib.util.find_spec("keras")  # Keras's own source, whatever it uses (found, not imported)
    sources = [p.read_text(encoding="utf-8") for p in Path(keras.origin).parent.glob("src/layers/core/*.py")]
    assert _walk_checked(sources) > 0


def _walk_checked(sources: list[str]) -> int:
    """How many of the sources' contexts were checked (see the tests above)."""
    singletons = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
    checked = 0
    for ctx in _contexts(sources):
        expected = {}
        for parent in ast.walk(ctx.tree):
            for child in ast.iter_child_nodes(parent):
                if not isinstance(child, singletons):
                    expected[child] = parent
        assert ctx.parents == expected
        assert len(ctx.nodes) == len(set(ctx.nodes)) == len(expected)
        checked += 1
    return checked


LEGACY_FORMS = """
import tensorflow as t
from tensorflow.contrib import mixed_precision as contrib_mp
from tensorflow.keras.mixed_precision import experimental as mpx
t.mixed_precision.Policy("mixed_float16")
t.compat.v1.train.MixedPrecisionLossScaleOptimizer(opt)
t.train.experimental.enable_mixed_precision_graph_rewrite(opt)
contrib_mp.LossScaleOptimizer(opt, manager)
mpx.Policy("mixed_float16")
t.keras.mixed_precision.experimental.LossScaleOptimizer(opt)
"""


def test_every_legacy_prefix_of_mp103_is_found_through_its_parts():
    from mpdoctor.rules.mp103_legacy_api import _LEGACY_PARTS, _LEGACY_PREFIXES

    ctx = ctx_of(LEGACY_FORMS)
    legacy = [(n.lineno, name) for n, name in ctx.imported_names() if name.startswith(_LEGACY_PREFIXES)]
    assert [line for line, _ in legacy] == [5, 6, 7, 8, 9, 10]  # each form
    found = [(n.lineno, name) for n, name in ctx.imported_names(_LEGACY_PARTS) if name.startswith(_LEGACY_PREFIXES)]
    assert found == legacy


def test_the_legacy_names_mp103_looks_for_are_found_through_their_parts():
    """MP103 asks only for the chains naming `experimental`, `contrib`, `compat` or `mixed_precision`: on every
    Python file of the test data (real-world scripts and the fixtures), the same legacy names as among all."""
    from mpdoctor.rules.mp103_legacy_api import _LEGACY_PARTS, _LEGACY_PREFIXES

    checked = 0
    for path in sorted(Path(__file__).parent.glob("[df]*/**/*.py")):
        try:
            ctx = ctx_of(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        legacy = [(n, name) for n, name in ctx.imported_names() if name.startswith(_LEGACY_PREFIXES)]
        assert [
            (n, name) for n, name in ctx.imported_names(_LEGACY_PARTS) if name.startswith(_LEGACY_PREFIXES)
        ] == legacy
        checked += bool(legacy)
    assert checked >= 10


@pytest.mark.parametrize(
    "source,major",
    [
        ("import tf_keras\n", 2),
        ("import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow as tf\n", 2),
        ("import keras\n", 3),
    ],
)
def test_keras_version_from_file(source, major):
    version = ctx_of(source).keras_version
    assert version.major == major and version.certain


def test_keras_version_from_environment(monkeypatch, tmp_path):
    """With nothing declared (a project of its own with no dependency files), the installed environment decides."""
    from mpdoctor.project import environment, target

    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    target.new_run()
    ctx_of = functools.partial(_ctx_of, directory=tmp_path)
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    assert ctx_of("import tensorflow as tf\n").keras_version.major == 2
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    monkeypatch.setattr(environment, "tensorflow_version", lambda: (2, 15))
    assert ctx_of("import tensorflow as tf\n").keras_version.major == 2
    monkeypatch.setattr(environment, "tensorflow_version", lambda: (2, 21))
    assert ctx_of("import tensorflow as tf\n").keras_version.major == 3
    monkeypatch.setattr(environment, "tensorflow_version", lambda: None)
    version = ctx_of("import tensorflow as tf\n").keras_version
    assert version.major == 3 and not version.certain
    assert ctx_of("import tensorflow as tf\n", keras_version=2).keras_version.major == 2


def test_policy_in_force_follows_statement_order_at_module_level():
    ctx = ctx_of("""\
        import keras
        a = keras.layers.Dense(1)
        keras.mixed_precision.set_global_policy("mixed_float16")
        b = keras.layers.Dense(1)
        keras.mixed_precision.set_global_policy(keras.mixed_precision.Policy("float32"))
        c = keras.layers.Dense(1)
        """)
    assert [ctx.layer_policies(ctx.layer_call(call_on_line(ctx, n))) for n in (2, 4, 6)] == [
        {"float32"},
        {"mixed_float16"},
        {"float32"},
    ]


def test_function_inherits_policy_from_its_call_sites():
    ctx = ctx_of("""\
        import tensorflow as tf
        from tensorflow.keras import mixed_precision

        def build():
            return tf.keras.layers.Dense(1)

        def main():
            mixed_precision.set_global_policy("mixed_bfloat16")
            return build()

        if __name__ == "__main__":
            main()
        """)
    assert ctx.layer_policies(ctx.layer_call(call_on_line(ctx, 5))) == {"mixed_bfloat16"}


def test_function_called_before_and_after_the_policy_gets_both():
    ctx = ctx_of("""\
        import keras
        POLICY = keras.mixed_precision.Policy("mixed_float16")
        def build():
            return keras.layers.Dense(1)
        reference = build()
        keras.mixed_precision.set_global_policy(POLICY)
        model = build()
        """)
    layer = ctx.layer_call(call_on_line(ctx, 4))
    assert ctx.layer_policies(layer) == {"float32", "mixed_float16"}
    assert ctx.float16_policy(ctx.layer_policies(layer)) == "mixed_float16"


def test_per_layer_dtype_wins_and_unknown_is_none():
    ctx = ctx_of("""\
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        a = tf.keras.layers.Dense(1, dtype=tf.float32)
        b = tf.keras.layers.Dense(1, dtype=some_policy())
        """)
    assert ctx.layer_policies(ctx.layer_call(call_on_line(ctx, 3))) == {"float32"}
    assert ctx.layer_policies(ctx.layer_call(call_on_line(ctx, 4))) == {None}


def test_custom_layer_methods_take_the_policy_of_their_instances():
    ctx = ctx_of("""\
        import keras
        class Scale(keras.layers.Layer):
            def call(self, x):
                return x * 2.0
        keras.mixed_precision.set_global_policy("mixed_float16")
        s32 = Scale(dtype="float32")
        """)
    assert "Scale" in ctx.custom_layer_classes
    assert ctx.class_policies("Scale") == {"float32"}


def test_producer_and_layer_instance_resolution():
    ctx = ctx_of("""\
        import keras
        inp = keras.Input((4,))
        head = keras.layers.Dense(3, activation="softmax")
        x = keras.layers.Dense(8)(inp)
        out = head(x)
        """)
    out_name = ast.parse("out", mode="eval").body
    out_name.lineno = 6
    assert ctx.producer(out_name).node.lineno == 3


def test_a_checked_file_leaves_no_reference_cycle_for_the_garbage_collector():
    """The static pass frees each file's tree by reference counting (StaticContext.release): a cycle through the
    context kept every tree for the collector, a sixth of a 2,000-file run's CPU time."""
    import gc

    from mpdoctor.config import Config
    from mpdoctor.engine import check_source

    source = Path(__file__).parents[1] / "bench" / "_synthetic.py"
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)  # module_text: findings from several rules
    text = namespace["module_text"](2)
    check_source(text, "tests/model.py", Config())  # rules loaded, lazy imports done
    gc.collect()
    gc.disable()
    try:
        diagnostics, _ = check_source(text, "tests/model.py", Config())
        assert {d.code for d in diagnostics} >= {"MP401", "MP403"}  # the rules that memoise per file did run
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_the_checker_answers_every_query_of_the_semantic_model():
    """Rules and the analyses they share ask the checker (StaticContext) what its semantic model and the policies
    in force know: every public query of either is one of the checker's, the same answer."""
    from mpdoctor.static.policies_in_force import PoliciesInForce
    from mpdoctor.static.semantic import SemanticModel

    text = "import keras\nx = keras.layers.Dense(4)\n"
    ctx = StaticContext("m.py", "m.py", text, ast.parse(text))
    queries = [name for cls in (SemanticModel, PoliciesInForce) for name in dir(cls) if not name.startswith("_")]
    assert [name for name in queries if not hasattr(ctx, name)] == []
    assert ctx.semantic.source is ctx.source and ctx.parents is ctx.semantic.parents
    assert ctx.policies.model is ctx.semantic and ctx.policy_events == ctx.policies.policy_events
