"""The trace's CPU-feature probe (does this CPU compute bfloat16 natively: mpdoctor/trace/child/analysis.py) and its
override `MPDOCTOR_CPU_BF16=0/1`, which lets one machine show what mpdoctor reports on the other kind of CPU: the
environment the trace records, and MP603 on a bfloat16 policy, follow the forced answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpdoctor.trace.child import analysis

ROOT = Path(__file__).resolve().parents[1]

BFLOAT16_SCRIPT = """\
import keras

keras.mixed_precision.set_global_policy("mixed_bfloat16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
"""


def _cpuinfo_says_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def test_the_override_forces_the_probe_either_way_and_anything_else_reads_the_cpu(monkeypatch):
    monkeypatch.setenv(analysis.CPU_BF16_ENV, "1")
    assert analysis._cpu_has_bf16() is True
    monkeypatch.setenv(analysis.CPU_BF16_ENV, "0")
    assert analysis._cpu_has_bf16() is False
    for unset in ("", "yes", "2"):
        monkeypatch.setenv(analysis.CPU_BF16_ENV, unset)
        assert analysis._cpu_has_bf16() is _cpuinfo_says_bf16()
    monkeypatch.delenv(analysis.CPU_BF16_ENV)
    assert analysis._cpu_has_bf16() is _cpuinfo_says_bf16()


@pytest.mark.parametrize("forced", ["0", "1"])
def test_mp603_on_a_bfloat16_policy_follows_the_forced_probe(tensorflow, tmp_path, forced):
    """The trace child inherits the override: with it at 0, a CPU-only machine is one without bfloat16 hardware
    (MP603); at 1, one with it (nothing to report)."""
    (tmp_path / "bf16.py").write_text(BFLOAT16_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_USE_LEGACY_KERAS="0",
        **{analysis.CPU_BF16_ENV: forced},
    )
    result = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "check", "--select", "MP603", "--format", "json", "bf16.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    report = json.loads(result.stdout)
    environment = report["traces"][0]["environment"]
    assert environment["cpu_bf16"] is (forced == "1"), result.stderr
    ampere = any((g["compute_capability"] or [0])[0] >= 8 for g in environment["gpus"])  # fast bfloat16 anyway
    found = [(d["code"], d["line"], "no bfloat16-capable device" in d["message"]) for d in report["diagnostics"]]
    assert found == ([] if forced == "1" or ampere else [("MP603", 3, True)]), result.stderr
