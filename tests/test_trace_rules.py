"""Trace rules: pure checks on hand-made facts (no TensorFlow), then small real scripts run in the child."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from mpdoctor.config import Config
from mpdoctor.facts.schema import Facts
from mpdoctor.trace.checks import run_checks
from mpdoctor.trace_context import TraceContext


def facts(**overrides) -> Facts:
    """Hand-made facts, read back through the schema like the child's JSON."""
    base = {"environment": {"gpus": [], "keras_major": 3, "global_policy": None}}
    base.update(overrides)
    return Facts.from_json(base)


def run(f: Facts, code: str, config: Config | None = None):
    ctx = TraceContext("m.py", "m.py", "", None)
    return [d for d in run_checks(f, ctx, config or Config()) if d.code == code]


def with_mp603() -> Config:
    config = Config()
    config.select.add("MP603")  # opt-in
    return config


POLICY = {
    "policy": "mixed_float16",
    "api": "set_global_policy",
    "location": {"file": "m.py", "line": 3},
    "layers_before": 0,
}


@pytest.mark.parametrize(
    "gpus,expected",
    [
        ([], 1),
        ([{"name": "T4", "compute_capability": [7, 5]}], 0),
        ([{"name": "K80", "compute_capability": [3, 7]}], 1),
    ],
)
def test_mp603_depends_on_the_devices(gpus, expected):
    assert len(run(facts(policy_events=[POLICY], environment={"gpus": gpus}), "MP603", with_mp603())) == expected


def test_mp603_from_a_policy_in_force_from_the_start():  # --assume-policy: no event of the file set it
    [d] = run(facts(environment={"gpus": [], "global_policy": "mixed_float16"}), "MP603", with_mp603())
    assert d.message.startswith('global policy "mixed_float16" on a machine with no GPU') and d.location.line == 1


def test_mp603_is_opt_in():
    assert run(facts(policy_events=[POLICY]), "MP603") == []


@pytest.mark.parametrize(
    "dtype,gpus,expected",
    [
        ("mixed_float16", [], ['Dense `dense` with dtype="mixed_float16" on a machine with no GPU']),
        ("float16", [{"name": "K80", "compute_capability": [3, 7]}], ["no GPU of compute capability 7.0 or higher"]),
        ("mixed_bfloat16", [], ["no bfloat16-capable device"]),
        ("mixed_float16", [{"name": "T4", "compute_capability": [7, 5]}], []),
        ("float32", [], []),
        (None, [], []),
    ],
)
def test_mp603_from_a_layer_dtype_alone(dtype, gpus, expected):
    layer = {"name": "dense", "class": "Dense", "explicit_dtype": dtype, "created_at": {"file": "m.py", "line": 5}}
    found = run(facts(layers={"1": layer}, environment={"gpus": gpus}), "MP603", with_mp603())
    assert len(found) == len(expected)
    for d, text in zip(found, expected, strict=True):
        assert text in d.message and d.location.line == 5


def savedmodel_load(accepted):
    return {
        "api": "hub.KerasLayer",
        "handle": "/m",
        "layer_uid": "1",
        "location": {"file": "m.py", "line": 7},
        "savedmodel": {"error": None, "accepted_input_dtypes": accepted, "signatures": []},
    }


@pytest.mark.parametrize(
    "accepted,compute,expected",
    [
        (["float32"], "float16", 1),
        (["float16", "float32"], "float16", 0),
        (["float32"], "float32", 0),
        (["float32"], "bfloat16", 1),
    ],
)
def test_mp201_compares_the_dtype_after_autocast_with_the_accepted_ones(accepted, compute, expected):
    layers = {
        "1": {
            "name": "keras_layer",
            "class": "KerasLayer",
            "policy": f"mixed_{compute}",
            "compute_dtype": compute,
            "autocast": True,
        }
    }
    found = run(facts(layers=layers, savedmodel_loads=[savedmodel_load(accepted)]), "MP201")
    assert [(d.location.line, d.passes) for d in found] == [(7, ("trace",))] * expected


def test_mp202_reports_an_unreadable_handle():
    load = savedmodel_load([])
    load["savedmodel"] = {"error": {"kind": "offline", "message": "https://tfhub.dev/x is not in the TF Hub cache"}}
    [d] = run(facts(savedmodel_loads=[load]), "MP202")
    assert "not in the TF Hub cache" in d.message and d.location.line == 7


@pytest.mark.parametrize("handle", ["https://tfhub.dev/google/x/1", "gs://bucket/model", "/no/such/savedmodel"])
def test_mp202_says_once_that_the_signature_checks_were_skipped(handle, tmp_path, monkeypatch):
    from mpdoctor.artifacts.savedmodel import read_savedmodel

    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path))  # an empty cache
    load = savedmodel_load([])
    load["handle"] = handle
    load["savedmodel"] = read_savedmodel(handle).to_json()
    [d] = run(facts(savedmodel_loads=[load]), "MP202")
    assert d.message.count("signature checks were skipped") == 1, d.message
    assert d.message.endswith("; its signature checks were skipped")


def test_mp402_and_mp401_from_graph_outputs():
    graph = {
        "nodes": [
            {
                "id": "logits",
                "class": "Dense",
                "activation": "linear",
                "policy": "mixed_float16",
                "created_at": {"file": "m.py", "line": 5},
            },
            {
                "id": "probs",
                "class": "Dense",
                "activation": "softmax",
                "policy": "mixed_float16",
                "created_at": {"file": "m.py", "line": 6},
            },
            {
                "id": "safe",
                "class": "Activation",
                "activation": "softmax",
                "policy": "float32",
                "created_at": {"file": "m.py", "line": 8},
            },
        ],
        "edges": [],
        "outputs": [
            {"node": "logits", "dtype": "float16"},
            {"node": "probs", "dtype": "float16"},
            {"node": "safe", "dtype": "float32"},
        ],
    }
    f = facts(models=[{"name": "m", "graph": graph}])
    assert [d.location.line for d in run(f, "MP402")] == [5]
    assert [d.location.line for d in run(f, "MP401")] == [6]


needs_tf = pytest.mark.usefixtures("tensorflow")


@needs_tf
def test_json_output_carries_the_graph_and_the_trace_confirms_mp101(tmp_path):
    script = tmp_path / "late.py"
    script.write_text(
        textwrap.dedent("""\
        import keras

        def build_model():
            inputs = keras.Input((8,))
            return keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(keras.layers.Dense(16)(inputs)))

        model = build_model()
        keras.mixed_precision.set_global_policy("mixed_float16")
        """)
    )
    result = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--trace", "--format", "json", "late.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "TF_USE_LEGACY_KERAS": "0"},
    )
    data = json.loads(result.stdout)
    mp101 = [d for d in data["diagnostics"] if d["code"] == "MP101"]
    assert [(d["line"], d["passes"]) for d in mp101] == [(8, ["static", "trace"])]
    [trace] = data["traces"]
    [model] = trace["models"]
    nodes = {n["id"]: n for n in model["graph"]["nodes"]}
    assert {n["compute_dtype"] for n in nodes.values() if n["class"] == "Dense"} == {"float16", "float32"}
    assert all("dtype" in e for e in model["graph"]["edges"]) and model["graph"]["edges"]


@needs_tf
@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_lambda_cast_is_confirmed_by_the_graph(tmp_path, legacy):
    from trace_support import trace_check

    script = tmp_path / "lam.py"
    script.write_text(
        textwrap.dedent("""\
        import tensorflow as tf

        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = tf.keras.Input((8,), dtype="float64")
        x = tf.keras.layers.Lambda(lambda t: tf.cast(t, tf.float32))(inputs)
        x = tf.keras.layers.Dense(4)(x)
        outputs = tf.keras.layers.Activation("linear", dtype="float32")(x)
        model = tf.keras.Model(inputs, outputs)
        model.compile("adam", "mse")
        """)
    )
    found = {(d.code, d.location.line): d for d in trace_check(script, legacy=legacy)}
    assert found[("MP207", 5)].passes == ("static", "trace")
    assert ("MP602", 4) in found
    assert not [key for key in found if key[0] in ("MP001", "MP402", "MP401")]


@needs_tf
def test_pure_float16_policy_with_a_compiled_model_and_float16_export(tmp_path):
    from trace_support import trace_check

    export_dir = tmp_path / "exported"
    script = tmp_path / "pure.py"
    script.write_text(
        textwrap.dedent(f"""\
        import keras

        keras.mixed_precision.set_global_policy("float16")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile("adam", "mse")
        model.export({str(export_dir)!r})
        """)
    )
    found = {(d.code, d.location.line) for d in trace_check(script, legacy=False)}
    assert ("MP102", 3) in found
    assert ("MP203", 6) in found


def diagnose_codes(f: dict) -> list[str]:
    from mpdoctor.trace.checks import diagnose

    return sorted(d.code for d in diagnose(f, None, "", TraceContext("m.py", "m.py", "", None), Config()))


def test_a_failed_load_of_an_unreadable_savedmodel_is_mp202_not_mp001():
    load = savedmodel_load([])
    load["error"] = {"type": "OSError", "message": "/data/hub/x does not exist."}
    load["savedmodel"] = {"error": {"kind": "missing", "message": "/data/hub/x: no such file or directory"}}
    exception = {
        "type": "OSError",
        "message": "/data/hub/x does not exist.",
        "phase": "import",
        "location": {"file": "m.py", "line": 7},
    }
    assert diagnose_codes(facts(savedmodel_loads=[load], exception=exception)) == ["MP202"]


def test_unexplained_import_errors_are_mp001_but_a_failing_synthetic_batch_is_not():
    exception = {"type": "InvalidArgumentError", "message": "indices[0,9] = -1 is not in [0, 20000)", "location": None}
    assert diagnose_codes(facts(exception={**exception, "phase": "call"})) == []
    assert diagnose_codes(facts(exception={**exception, "phase": "import"})) == ["MP001"]


def test_a_crash_on_a_removed_api_is_reported_once_as_mp103():
    from mpdoctor.diagnostics import Diagnostic, Location, Severity
    from mpdoctor.engine import merge_passes

    static = [Diagnostic("MP103", "removed API", Location("m.py", 6, 1), Severity.ERROR)]
    crash = Diagnostic(
        "MP001",
        "importing the file raised AttributeError: module 'keras.mixed_precision' has no attribute 'experimental'",
        Location("m.py", 6, 1),
        Severity.ERROR,
        passes=("trace",),
    )
    other = Diagnostic(
        "MP001",
        "importing the file raised ValueError: bad shape",
        Location("m.py", 9, 1),
        Severity.ERROR,
        passes=("trace",),
    )
    assert [(d.code, d.location.line) for d in merge_passes(static, [crash, other])] == [("MP103", 6), ("MP001", 9)]


def test_two_trace_findings_on_one_static_line_merge_once():
    """A model discovered twice (a failed import falls back to every created model) reports the same line twice."""
    from mpdoctor.diagnostics import Diagnostic, Location, Severity
    from mpdoctor.engine import merge_passes

    static = [Diagnostic("MP401", "static", Location("m.py", 10, 5), Severity.ERROR)]
    traced = [
        Diagnostic("MP401", f"trace {i}", Location("m.py", 10, 5, layer="dense_1"), Severity.ERROR, passes=("trace",))
        for i in range(2)
    ]
    merged = merge_passes(static, traced)
    assert [(d.message, d.passes) for d in merged] == [("trace 0", ("static", "trace")), ("trace 1", ("trace",))]


@pytest.mark.parametrize("code,status", [("MP302", "overflow"), ("MP303", "underflow")])
def test_audit_findings_are_capped_per_checkpoint_but_the_rest_is_counted(code, status):
    row = {
        "values": 10,
        "overflow": 1,
        "max_abs": 1e5,
        "flushed": 5,
        "subnormal": 0,
        "flushed_fraction": 0.5,
        "subnormal_fraction": 0.0,
        "status": status,
    }
    audit = {"target_dtype": "float16", "variables": [{**row, "key": f"v{i}"} for i in range(23)]}
    restore = {
        "api": "tf.train.Checkpoint.read",
        "path": "ck",
        "location": {"file": "m.py", "line": 4},
        "error": None,
        "audit": audit,
    }
    found = run(facts(restores=[restore]), code)
    assert len(found) == 21 and "3 more variables of ck" in found[-1].message
