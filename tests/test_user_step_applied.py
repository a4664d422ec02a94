"""How the trace records the gradients a JAX or PyTorch step hands its optimizer (trace/child/user_step.py
`_applied`): whichever way the step passes them (positionally, by keyword, as a generator that can be read only
once), the optimizer still gets every gradient and the record pairs each with its variable; a LossScaleOptimizer
whose apply_gradients calls its own apply is recorded once."""

from __future__ import annotations

import pytest

pytest.importorskip("numpy")  # the trace child's modules need it; the no-TensorFlow stage has none

from mpdoctor.trace.child.user_step import _applied


class Optimizer:
    """The three methods of a Keras 3 optimizer, with the signatures of keras.optimizers.Optimizer."""

    def __init__(self, loss_scale_optimizer: bool = False):
        self._trainable_variables = ["w", "b"]
        self.received: list = []
        self.loss_scale_optimizer = loss_scale_optimizer

    def apply(self, grads, trainable_variables=None):
        self.received.append(list(grads))

    def apply_gradients(self, grads_and_vars):
        pairs = list(grads_and_vars)
        self.received.append(pairs)
        if self.loss_scale_optimizer:  # it hands them on to the same object's apply
            self.apply([g for g, _ in pairs], [v for _, v in pairs])

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        self.received.append(list(grads))


def _recorded(optimizer, call) -> list:
    sink: list = []
    with _applied(sink, [optimizer]):
        call(optimizer)
    return [(variable, grad) for variable, grad, _ in sink]


@pytest.mark.parametrize(
    "call",
    [
        lambda o: o.apply([1, 2]),
        lambda o: o.apply(grads=(g for g in [1, 2])),
        lambda o: o.apply([1, 2], ["w", "b"]),
        lambda o: o.apply_gradients(zip([1, 2], ["w", "b"], strict=True)),
        lambda o: o.apply_gradients(grads_and_vars=zip([1, 2], ["w", "b"], strict=True)),
        lambda o: o.stateless_apply([], (g for g in [1, 2]), [0.0, 0.0]),
        lambda o: o.stateless_apply([], grads=[1, 2], trainable_variables=[0.0, 0.0]),
    ],
    ids=[
        "apply",
        "apply-generator-keyword",
        "apply-variables",
        "apply_gradients-zip",
        "apply_gradients-keyword",
        "stateless-generator",
        "stateless-keyword",
    ],
)
def test_every_gradient_reaches_the_optimizer_and_the_record(call):
    optimizer = Optimizer()
    assert _recorded(optimizer, call) == [("w", 1), ("b", 2)]
    received = optimizer.received[0]
    assert [g if not isinstance(g, tuple) else g[0] for g in received] == [1, 2]


def test_a_nested_apply_is_recorded_once_and_the_methods_are_restored():
    optimizer = Optimizer(loss_scale_optimizer=True)
    assert _recorded(optimizer, lambda o: o.apply_gradients(zip([1, 2], ["w", "b"], strict=True))) == [
        ("w", 1),
        ("b", 2),
    ]
    assert len(optimizer.received) == 2  # the inner apply still ran
    assert "apply" not in vars(optimizer) and "apply_gradients" not in vars(optimizer)
