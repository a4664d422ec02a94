"""Fix safety (issue 30): a fix that is refused or rejected says why, is not counted as fixable afterwards and is
not called unverified; every refused fix over the wild corpus (tests/data/wild) gives its reason. The training
steps of the fixes themselves are measured in tests/test_fix_training.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mpdoctor.cli import main
from mpdoctor.config import Config
from mpdoctor.engine import check_paths
from mpdoctor.registry import get_rule

FIXES = Path(__file__).parent / "fixes"
WILD = sorted(p for p in (Path(__file__).parent / "data" / "wild" / "files").iterdir() if p.is_file())
# The one kind of MP103 finding that has no fix on purpose and needs no refusal: TF1 graph code told to keep the
# graph rewrite with a tf.compat.v1.train optimizer (it still runs there).
_KEPT_ON_PURPOSE = "in TF1 graph code keep"


def _run(tmp_path: Path, monkeypatch, capsys, *args: str) -> str:
    monkeypatch.chdir(tmp_path)
    main(["check", "--no-trace", *args, "step.py"])
    captured = capsys.readouterr()
    return captured.out if "json" in args else captured.out + captured.err  # --diff: what is not applied on stderr


def test_a_rejected_fix_is_not_counted_as_fixable_nor_called_unverified(tmp_path, monkeypatch, capsys, pinned_target):
    text = (FIXES / "MP103" / "hasattr_guard_keras3.in.py").read_text(encoding="utf-8")
    (tmp_path / "step.py").write_text(text, encoding="utf-8")
    before = _run(tmp_path, monkeypatch, capsys, "--target-tensorflow", ">=2.16")
    assert "1 fixable with --fix" in before

    # The check of the fixed text fails (as a re-trace that still reports the finding would): nothing is applied.
    monkeypatch.setattr("mpdoctor.fix.files.round_trip_problem", lambda fixed: "the fixed source is refused here")
    for mode in ("--fix", "--diff"):
        out = _run(tmp_path, monkeypatch, capsys, mode, "--target-tensorflow", ">=2.16")
        assert "fix not applied: the fixed source is refused here" in out
        assert "fixable with --fix" not in out and "[*]" not in out, out
    document = json.loads(
        _run(tmp_path, monkeypatch, capsys, "--fix", "--format", "json", "--target-tensorflow", ">=2.16")
    )
    [result] = document["fixes"]
    assert result["verification"] == "rejected: the fixed source is refused here", result
    assert [r["reason"] for r in result["not_applied"]] == ["the fixed source is refused here"]
    assert document["summary"]["fixable"] == 0
    assert [d["fix"] for d in document["diagnostics"] if d["code"] == "MP103"] == [None]
    assert (tmp_path / "step.py").read_text(encoding="utf-8") == text


@pytest.mark.usefixtures("recorded_environment")  # judged as next to TF 2.21 / Keras 3, also in the no-TF stage
def test_every_refused_fix_over_the_wild_corpus_says_why(monkeypatch):
    """Findings of a fixable rule without a fix, ported to Keras 3 as tests/data/wild/fix_counts.py does: each says
    why in its message (text and JSON). Before issue 30, 4 of 18 said nothing (3 experimental Policy calls with a
    loss_scale, now fixed; the TF1 graph rewrite kept on purpose)."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    config = Config()
    config.keras_version = 3
    report = check_paths(WILD, config)
    unfixed = [
        d
        for d in report.diagnostics
        if get_rule(d.code).fixable and d.fix is None and d.cell_fix is None and _KEPT_ON_PURPOSE not in d.message
    ]
    assert unfixed, "the corpus has refused fixes"
    reasons = [re.search(r"not fixed automatically: ([^;(]+)", d.message) for d in unfixed]
    assert all(reasons), [d.message for d, r in zip(unfixed, reasons, strict=True) if not r]
    assert {r.group(1).strip() for r in reasons} == {"gradients are accumulated", "gradients are clipped"}
    policies = [d for d in report.diagnostics if "experimental.Policy" in d.message]
    assert len(policies) == 3 and all(d.fix is not None for d in policies)


TARGET_CORPUS = sorted(
    p for p in (Path(__file__).parent / "data" / "target_corpus" / "files").rglob("*") if p.suffix == ".py"
)


@pytest.mark.usefixtures("recorded_environment")
@pytest.mark.parametrize(
    ("keras_version", "target", "refused", "policies"),
    [(3, None, 30, 3), (None, "==2.21", 50, 14)],
    ids=["ported-to-keras3", "target-tf-2.21"],
)
def test_every_refused_fix_over_both_real_code_corpora_says_why(monkeypatch, keras_version, target, refused, policies):
    """Issue 30's closing note: over the wild corpus and the target corpus (real code with loss scaling), ported to
    Keras 3 or judged against TF 2.21, every finding of a fixable rule left without a fix says why (the TF1 graph
    rewrite kept on purpose aside), and every `mixed_precision.experimental.Policy` is fixed, a `loss_scale=`
    argument dropped with it (TF 2.21 raises TypeError on it)."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    config = Config()
    config.keras_version, config.target_tensorflow = keras_version, target
    report = check_paths([*WILD, *TARGET_CORPUS], config)
    unfixed = [
        d
        for d in report.diagnostics
        if get_rule(d.code).fixable and d.fix is None and d.cell_fix is None and _KEPT_ON_PURPOSE not in d.message
    ]
    silent = [d.message for d in unfixed if "not fixed automatically: " not in d.message]
    assert len(unfixed) == refused and not silent, silent
    found = [d for d in report.diagnostics if "experimental.Policy" in d.message]
    assert len(found) == policies and all(d.fix is not None for d in found), [d.message for d in found]
    edits = [edit.content for d in found for edit in d.fix.edits if "Policy(" in edit.content]
    assert edits and not any("loss_scale" in content for content in edits), edits


def test_a_keras3_port_rewrites_both_halves_of_a_class_or_module_or_neither(monkeypatch):
    """Issue 30, over the real files of both corpora ported to Keras 3: no get_scaled_loss / get_unscaled_gradients
    keeps a fix while another call of the port in its class (or module) is refused. NVIDIA's DLRM trainer scales in
    train_step and unscales in _weight_update, then loops over the gradients: its scaling half used to be rewritten
    alone (AttributeError at the first step)."""
    import ast

    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    config = Config()
    config.keras_version = 3
    report = check_paths([*WILD, *TARGET_CORPUS], config)
    groups: dict[tuple[str, str], list] = {}
    for path in {d.location.path for d in report.diagnostics}:
        if not path.endswith(".py"):
            continue
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        classes = [(n.lineno, n.end_lineno, n.name) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for d in report.diagnostics:
            port = re.search(r"\.(get_scaled_loss|get_unscaled_gradients)\(\) is the tf_keras", d.message)
            if d.location.path == path and d.code == "MP103" and port:
                inner = [c for c in classes if c[0] <= d.location.line <= c[1]]
                owner = max(inner)[2] if inner else "<module>"
                groups.setdefault((path, owner), []).append(d)
    mixed = {k: [(d.location.line, d.fix is not None) for d in v] for k, v in groups.items()}
    assert all(len({fixed for _, fixed in v}) == 1 for v in mixed.values()), mixed
    dlrm = next(v for (path, _), v in groups.items() if path.endswith("nv-dlrm-trainer/nn/trainer.py"))
    assert len(dlrm) == 2 and all("gradients are passed to a for loop" in d.message for d in dlrm)


def test_a_fixed_loss_scale_in_an_experimental_policy_is_refused_with_its_reason():
    from mpdoctor.engine import check_source

    text = (
        "import tensorflow as tf\n"
        'policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16", loss_scale=128)\n'
        'dynamic = tf.keras.mixed_precision.experimental.Policy("mixed_float16", loss_scale="dynamic")\n'
    )
    config = Config()
    config.keras_version = 3
    diagnostics, _ = check_source(text, "p.py", config)
    fixed, dynamic = sorted((d for d in diagnostics if d.code == "MP103"), key=lambda d: d.location.line)
    assert fixed.fix is None and "not fixed automatically: a loss scale other than dynamic" in fixed.message
    assert dynamic.fix is not None and dynamic.fix.edits[0].content.endswith('Policy("mixed_float16")')


# A -1e9 mask inside a layer's `call`, run as a script: whether the float16 model's outputs are finite.
MASK_LAYER = """\
import numpy as np
import tensorflow as tf
import KERAS

keras.mixed_precision.set_global_policy("mixed_float16")


class MaskedSoftmax(keras.layers.Layer):
    def call(self, x):
        mask = tf.cast(x > 0.5, x.dtype)
        return tf.nn.softmax(x + (1.0 - mask) * -1e9)


inputs = keras.Input((8,))
model = keras.Model(inputs, keras.layers.Dense(4, dtype="float32")(MaskedSoftmax()(keras.layers.Dense(8)(inputs))))

if __name__ == "__main__":
    print("finite", bool(np.isfinite(model(np.random.default_rng(0).random((4, 8)))).all()))
"""


@pytest.mark.usefixtures("tensorflow")
@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_a_fix_inside_a_layer_call_is_verified_on_the_fixed_text(tmp_path, monkeypatch, capsys, legacy):
    """The re-trace runs the fixed text: tf_keras runs a layer's `call` as AutoGraph converts it from its source,
    which linecache read from the user's file on disk (the unfixed one), so MP403's fix was rejected as "still
    reported after the fix" on tf_keras (#30)."""
    from trace_support import run_python

    path = tmp_path / "model.py"
    path.write_text(MASK_LAYER.replace("KERAS", "tf_keras as keras" if legacy else "keras"), encoding="utf-8")
    assert run_python(path, legacy=legacy).stdout.split()[-1] == "False"  # the mask overflows float16
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1" if legacy else "0")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--fix", "--select", "MP403", "--format", "json", "model.py"]) == 0
    [result] = json.loads(capsys.readouterr().out)["fixes"]
    assert result["verification"] == "verified" and result["not_applied"] == [], result
    assert "-1e4" in path.read_text(encoding="utf-8")
    assert run_python(path, legacy=legacy).stdout.split()[-1] == "True"
