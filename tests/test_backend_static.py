"""MP501/MP502 on Keras 3 training steps written for JAX and PyTorch (mpdoctor.static.backend_steps): the
false-positive traps next to the fixtures' positives (tests/fixtures/MP50[12]/{jax,torch}_*.py, each run for real
by tests/test_backend_static_loops.py), and the wording in the backend's own API. No TensorFlow, jax or torch."""

from __future__ import annotations

import pytest

from mpdoctor.config import Config
from mpdoctor.engine import check_source

JAX_STEP = """
import jax
import keras

keras.mixed_precision.set_global_policy("{policy}")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
optimizer = {optimizer}

def compute_loss(trainable, non_trainable, x, y):
    pred, non_trainable = model.stateless_call(trainable, non_trainable, x)
    loss = keras.ops.mean(keras.ops.square(pred - y))
{scale}    return loss, non_trainable

grad_fn = jax.value_and_grad(compute_loss, has_aux=True)

def step(trainable, non_trainable, optimizer_variables, x, y):
    (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
    trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, grads, trainable)
    return trainable, non_trainable, optimizer_variables
"""

TORCH_STEP = """
import torch
import keras

keras.mixed_precision.set_global_policy("{policy}")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
optimizer = {optimizer}

def step(x, y):
    model.zero_grad()
    loss = keras.ops.mean(keras.ops.square(model(x) - y))
    {backward}
    grads = [v.value.grad for v in model.trainable_variables]
    with torch.no_grad():
        optimizer.apply(grads, model.trainable_variables)
"""

PLAIN = "keras.optimizers.Adam()"
LSO = "keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())"


def findings(text: str, keras_version: int = 3) -> list[tuple[str, int, str]]:
    config = Config()
    config.keras_version = keras_version
    diagnostics, error = check_source(text, "t.py", config)
    assert error is None
    return [(d.code, d.location.line, d.message) for d in diagnostics if d.code in ("MP501", "MP502")]


def jax_step(policy="mixed_float16", optimizer=PLAIN, scale="") -> str:
    return JAX_STEP.format(policy=policy, optimizer=optimizer, scale=scale)


def torch_step(policy="mixed_float16", optimizer=PLAIN, backward="loss.backward()") -> str:
    return TORCH_STEP.format(policy=policy, optimizer=optimizer, backward=backward)


def test_a_jax_step_without_scaling_is_mp501_spelled_for_jax():
    ((code, line, message),) = findings(jax_step())
    assert (code, line) == ("MP501", 14)
    assert "custom JAX training step under mixed_float16" in message
    assert "optimizer.scale_loss(loss)" in message and "keras.StatelessScope" in message
    assert "stateless_apply" in message
    assert "GradientTape" not in message and "tf." not in message


def test_a_torch_step_without_scaling_is_mp501_spelled_for_torch():
    ((code, line, message),) = findings(torch_step())
    assert (code, line) == ("MP501", 12)
    assert "optimizer.scale_loss(loss).backward()" in message
    assert "GradientTape" not in message and "tf." not in message


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "bfloat16"])
def test_no_finding_where_no_loss_scaling_is_needed(policy):
    assert findings(jax_step(policy)) == []
    assert findings(torch_step(policy)) == []


def test_no_finding_for_a_step_that_scales_as_keras_does():
    scope = (
        "    with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_variables))):\n"
        "        loss = optimizer.scale_loss(loss)\n"
    )
    assert findings(jax_step(optimizer=LSO, scale=scope)) == []
    assert findings(torch_step(optimizer=LSO, backward="optimizer.scale_loss(loss).backward()")) == []
    scaled = torch_step(optimizer=LSO, backward="scaled = optimizer.scale_loss(loss)\n    scaled.backward()")
    assert findings(scaled) == []


def test_a_loss_scaled_by_hand_or_by_torch_gradscaler_is_left_alone():
    assert findings(jax_step(scale="    loss = loss * 1024.0\n")) == []
    scaler = torch_step(backward="scaler = torch.amp.GradScaler()\n    scaler.scale(loss).backward()")
    assert findings(scaler) == []


def test_no_finding_without_a_keras_optimizer_in_the_step():
    """optax, torch.optim, a pandas `.apply`: not a Keras optimizer's step."""
    optax = jax_step().replace("optimizer.stateless_apply(optimizer_variables, grads, trainable)", "tx.update(grads)")
    assert findings(optax) == []
    torch_optim = torch_step(optimizer="torch.optim.SGD(model.parameters(), lr=0.1)").replace(
        "optimizer.apply(grads, model.trainable_variables)", "optimizer.step()"
    )
    assert findings(torch_optim) == []
    frame = torch_step(optimizer="pandas.DataFrame()")
    assert findings(frame) == []


def test_a_lambda_or_an_unknown_function_is_not_guessed():
    assert findings(jax_step().replace("jax.value_and_grad(compute_loss", "jax.value_and_grad(lambda *a: 0.0")) == []
    assert findings(jax_step().replace("jax.value_and_grad(compute_loss", "jax.value_and_grad(imported_loss")) == []


def test_a_loss_function_defined_twice_is_the_one_before_the_gradient_call():
    """As in Keras's guide "Writing a training loop from scratch in JAX": the loss function is redefined (with
    metrics) before a second `jax.value_and_grad`; each call differentiates the definition above it."""
    first = jax_step()
    second = first.replace("def compute_loss(", "def compute_loss(", 1)
    unscaled_then_scaled = first + second.split("optimizer = keras.optimizers.Adam()\n", 1)[1].replace(
        "    return loss, non_trainable", "    loss = loss * 1024.0\n    return loss, non_trainable"
    )
    assert [(code, line) for code, line, _ in findings(unscaled_then_scaled)] == [("MP501", 14)]


def test_two_keras_optimizers_are_not_guessed_between():
    text = jax_step() + "\nother = keras.optimizers.SGD()\nother.stateless_apply([], [], [])\n"
    assert findings(text) == []


def test_a_keras2_target_has_no_jax_or_torch_step():
    assert findings(jax_step(), keras_version=2) == []


def test_lso_without_scale_loss_is_mp502():
    ((code, _, message),) = findings(jax_step(optimizer=LSO))
    assert code == "MP502" and "stateless_apply() divides the gradients" in message
    ((code, _, message),) = findings(torch_step(optimizer=LSO))
    assert code == "MP502" and "apply() divides the gradients" in message


def test_scale_loss_without_stateless_scope_is_mp502_unless_variables_are_written_back():
    text = jax_step(optimizer=LSO, scale="    loss = optimizer.scale_loss(loss)\n")
    ((code, line, message),) = findings(text)
    assert (code, line) == ("MP502", 12) and "never updates" in message
    synced = text + "\nfor variable, value in zip(optimizer.variables, new_values):\n    variable.assign(value)\n"
    assert findings(synced) == []
    compiled = text.replace(f"optimizer = {LSO}", "model.compile(optimizer=keras.optimizers.Adam())").replace(
        "optimizer.", "model.optimizer."
    )
    assert findings(compiled) == []  # fit's traced step raises on it instead: an error the user sees


def test_a_float16_autocast_needs_scaling_under_any_policy_and_bfloat16_none():
    for autocast, expected in (
        ('torch.autocast("cpu", dtype=torch.float16)', ["MP501"]),
        ('torch.autocast("cuda")', ["MP501"]),
        ('torch.autocast("cpu", dtype=torch.bfloat16)', []),
        ('torch.autocast("cpu")', []),
    ):
        text = torch_step("float32").replace("    loss = keras.ops", f"    with {autocast}:\n        loss = keras.ops")
        assert [code for code, _, _ in findings(text)] == expected, autocast
    under_policy = torch_step("mixed_float16").replace(
        "    loss = keras.ops", '    with torch.autocast("cpu", dtype=torch.bfloat16):\n        loss = keras.ops'
    )
    assert [code for code, _, _ in findings(under_policy)] == ["MP501"]  # the layers still compute in float16
