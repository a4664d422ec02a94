"""`mpdoctor plan` on models with planted hazards (issue 16), against the one-layer-at-a-time sweep.

    python bench/plan.py [--quick]

Each model is a chain of n layers under mixed_float16 (n = 50, 200, 1000; --quick: 50 only): exact benign layers
(Dense with a permutation-matrix kernel: float16 moves their values without rounding, so every error comes from a
hazard) and k = 5 planted hazards at known depths:
- a padding row normalised with a custom rsqrt and eps 1e-12 (0 in float16: NaN; MP403 seeds it),
- a softmax behind a -1e9 mask (-inf in float16: NaN; MP403 seeds it),
- a log-sum-exp of large values computed naively (exp overflows: inf; found on the sample),
- a normalisation by a large sum (inf in float16, so the layer outputs 0: an error of 100%; found on the sample),
- a softmax head (MP401 seeds it).
Printed per n: whether the plan found exactly the planted set (or a verified smaller one), the forward passes it
spent against the naive sweep (n + 1 passes; target: at most 2*k*log2(n) + k + 2), and the wall time of
`mpdoctor plan` against `mpdoctor check` of the same file (the trace the plan builds on), measured in the same run.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PYTHON, main_for, python_env, row

SIZES = (50, 200, 1000)
HAZARDS = ("padded_rms_norm", "masked_softmax", "log_sum_exp", "sum_normalise", "head")

HEADER = """\
import sys

import numpy as np
import tensorflow as tf
import keras

sys.setrecursionlimit(20000)  # Keras builds a functional graph recursively: 1000 chained layers need more depth

keras.mixed_precision.set_global_policy("mixed_float16")
WIDTH = 32


class PaddedRMSNorm(keras.layers.Layer):  # a padding row normalised with eps 1e-12 (0 in float16)
    def call(self, x):
        pad = tf.zeros_like(x[:, :1])
        return x + pad * tf.math.rsqrt(tf.reduce_mean(tf.square(pad), -1, keepdims=True) + 1e-12)


class MaskedSoftmax(keras.layers.Layer):  # -1e9 is -inf in float16, and 0 * -inf is NaN
    def call(self, x):
        mask = tf.cast(x > 0.5, x.dtype)
        return tf.nn.softmax(x + (1.0 - mask) * -1e9) * WIDTH


class LogSumExp(keras.layers.Layer):  # exp(20 x) overflows float16 for x > 0.55
    def call(self, x):
        return x + 0.01 * tf.math.log(tf.reduce_sum(tf.exp(x * 20.0), -1, keepdims=True))


class SumNormalise(keras.layers.Layer):  # the sum exceeds 65504: x / inf = 0 in float16
    def call(self, x):
        return x * 10000.0 / tf.reduce_sum(tf.abs(x) * 10000.0 + 1.0, -1, keepdims=True) * WIDTH


def permutation(seed):
    def init(shape, dtype=None):
        return np.eye(shape[0], dtype="float32")[np.random.default_rng(seed).permutation(shape[0])]

    return init


HAZARDS = {{{hazards}}}


def build_model():
    inputs = keras.Input((WIDTH,))
    x = inputs
    for i in range({benign}):
        if i in HAZARDS:
            x = HAZARDS[i]()(x)
        x = keras.layers.Dense(WIDTH, kernel_initializer=permutation(i), name=f"dense_{{i}}")(x)
    outputs = keras.layers.Dense(10, activation="softmax", name="head")(x)
    return keras.Model(inputs, outputs)
"""


def model_source(n: int) -> str:
    """n layers: n - 5 benign Dense, the 4 hazard layers at 10 %, 35 %, 60 % and 85 % of the depth, the head."""
    benign = n - len(HAZARDS)
    classes = ("PaddedRMSNorm", "MaskedSoftmax", "LogSumExp", "SumNormalise")
    depths = [int(benign * f) for f in (0.10, 0.35, 0.60, 0.85)]
    hazards = ", ".join(
        f'{d}: lambda: {c}(name="{name}")' for d, c, name in zip(depths, classes, HAZARDS, strict=False)
    )
    return HEADER.format(hazards=hazards, benign=benign)


def bound(k: int, n: int) -> float:
    return 2 * k * math.log2(n) + k + 2


def _run(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-m", "mpdoctor", *args], capture_output=True, text=True, env=python_env(), check=False
    )
    return time.perf_counter() - start, done


def measure(n: int, directory: Path) -> dict:
    path = directory / f"planted_{n}.py"
    path.write_text(model_source(n))
    seconds, done = _run(["plan", "--format", "json", "--trace-timeout", "1800", str(path)])
    document = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    if done.returncode == 2 or not document.get("models"):
        reason = document.get("failure") or done.stderr.strip()[-500:]
        raise RuntimeError(f"mpdoctor plan failed on n={n}: {reason}")
    plan = document["models"][0]["plan"]
    baseline, _ = _run(["check", "--no-cache", "--exit-zero", "-q", "--trace-timeout", "1800", str(path)])
    found = {layer["name"] for layer in plan["layers"]}
    return {"n": n, "plan": plan, "found": found, "seconds": seconds, "check_seconds": baseline}


def results(quick: bool = False) -> list[dict]:
    rows = []
    k = len(HAZARDS)
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-plan-") as workdir:
        for n in SIZES[:1] if quick else SIZES:
            m = measure(n, Path(workdir))
            plan = m["plan"]
            planted = set(HAZARDS)
            verified = bool(plan["final"] and plan["final"]["passed"])
            if m["found"] == planted:
                verdict = "S = planted set"
            elif m["found"] < planted and verified:
                verdict = f"S is a verified subset: missing {sorted(planted - m['found'])}"
            else:
                verdict = f"S differs: extra {sorted(m['found'] - planted)}, missing {sorted(planted - m['found'])}"
            verdict += ", verified" if verified else ", NOT verified"
            rows.append(
                row(
                    f"plan passes, n={n}, k={k}",
                    plan["forward_passes"],
                    plan["naive_passes"],
                    target=f"<= {bound(k, n):.0f}",
                    unit="passes",
                    note=f"{verdict}; vs the one-layer-at-a-time sweep",
                )
            )
            rows.append(
                row(
                    f"plan wall time, n={n}",
                    m["seconds"],
                    m["check_seconds"],
                    unit="s",
                    note=f"vs check of the same file; {plan['seconds']:.1f} s in the search itself",
                )
            )
    return rows


if __name__ == "__main__":
    raise SystemExit(main_for(results))
