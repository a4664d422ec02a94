"""Every registered rule's `bad` and `good` examples (what `mpdoctor explain` and the SARIF rule help show) are
complete files, run through mpdoctor by one parametrised test: the bad example must raise the rule's code, the good
one must not.

How an example is checked:
- a rule with a static form (passes S, ST, STA) by the static pass, in this process: fast and without TensorFlow
  (for a rule that also has a trace form, the static finding is the one the example teaches);
- a trace-only rule (passes T, TA) by the trace pass: the example is written to a temporary directory, which is also
  the working directory, and run in the trace child on tf_keras when the example asks for it (it sets
  TF_USE_LEGACY_KERAS or imports tf_keras), else on Keras 3. Saves in the example go to the trace's scratch
  directory and loads of the same path read them back, so examples make their own SavedModels and checkpoints.

MP603 describes the machine: its bad example (mixed_float16 set unconditionally) raises it only where the trace sees
no GPU of compute capability 7.0 or higher, and is skipped on a machine that has one.
"""

from __future__ import annotations

import ast
import importlib.util
import re

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_source
from mpdoctor.facts.keras_semantics import file_legacy_keras_setting, imported_roots
from mpdoctor.registry import Rule, all_rules


def uses_tf_keras(text: str) -> bool:
    tree = ast.parse(text)
    return file_legacy_keras_setting(tree) is not None or "tf_keras" in imported_roots(tree)


def runs_trace(rule: Rule) -> bool:
    return "S" not in rule.passes


def example(rule: Rule, kind: str) -> str:
    return {"bad": rule.bad, "good": rule.good}[kind]


def cases():
    for rule in all_rules():
        for kind in ("bad", "good"):
            marks = []
            if runs_trace(rule):
                text = example(rule, kind)
                needed = {"tensorflow"} | (imported_roots(ast.parse(text)) & {"tf_keras", "tensorflow_hub"})
                if uses_tf_keras(text):
                    needed.add("tf_keras")
                missing = sorted(p for p in needed if importlib.util.find_spec(p) is None)
                reason = f"the trace of this example needs {', '.join(missing)} (TensorFlow)"
                marks = [pytest.mark.tf, pytest.mark.skipif(bool(missing), reason=reason)]
            yield pytest.param(rule, kind, marks=marks, id=f"{rule.code}-{kind}")


def fast_float16_gpu(summaries: list) -> bool:
    """Whether the trace ran on a machine with a GPU of compute capability >= 7.0 (where MP603 stays quiet)."""
    return any(
        tuple(gpu.compute_capability or (0, 0)) >= (7, 0)
        for summary in summaries
        if summary.environment is not None
        for gpu in summary.environment.gpus
    )


def selection(rule: Rule) -> set[str]:
    """The default selection, plus the rule itself when it is opt-in (MP603)."""
    return Config().select | {rule.code}


@pytest.mark.parametrize(("rule", "kind"), list(cases()))
def test_example(rule: Rule, kind: str, tmp_path, monkeypatch):
    text = example(rule, kind)
    legacy = uses_tf_keras(text)
    pin = re.match(r"# requirements.txt: (.+)", text)  # the project the example lives in (MP003's pins)
    if pin:
        (tmp_path / "requirements.txt").write_text(pin.group(1) + "\n")
    if runs_trace(rule):
        from trace_support import trace_check

        path = tmp_path / "example.py"
        path.write_text(text + "\n", encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        summaries: list = []
        diagnostics = trace_check(path, legacy=legacy, summaries=summaries, select=selection(rule))
        if rule.code == "MP603" and kind == "bad" and fast_float16_gpu(summaries):
            pytest.skip("this machine has a GPU of compute capability >= 7.0: mixed_float16 is fast here")
    else:
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1" if legacy else "0")
        path = tmp_path / "example.py"
        path.write_text(text + "\n", encoding="utf-8")
        config = Config()
        config.select = selection(rule)
        diagnostics, error = check_source(text, "example.py", config, path=str(path))
        assert error is None, error.render()
    found = sorted({d.code for d in diagnostics})
    flavour = "tf_keras" if legacy else "Keras 3"
    pass_used = "trace" if runs_trace(rule) else "static pass"
    if kind == "bad":
        assert rule.code in found, f"the bad example of {rule.code} ({pass_used}, {flavour}) raised only {found}"
    else:
        raised = [d.message for d in diagnostics if d.code == rule.code]
        assert not raised, f"the good example of {rule.code} ({pass_used}, {flavour}) raised it: {raised}"
