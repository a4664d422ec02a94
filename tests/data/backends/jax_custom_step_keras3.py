# A JAX custom training step under mixed_float16 (issue 36), run for real by tests/test_backend_trace.py: without
# loss scaling the float16 gradients of a small loss flush to zero; with the LossScaleOptimizer's `scale_loss` inside
# the differentiated function, under a StatelessScope mapping the optimizer's variables threaded through (what
# Keras 3.15's own JAX trainer does; Keras 3.15 has no `stateless_scale_loss`), they survive. `python FILE scaled|unscaled`
# prints the share of the first kernel's gradient entries that are zero. The trace imports the file (the step under
# `__main__` does not run) and analyses the model.
import sys

import jax
import numpy as np
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16)(inputs)  # linear: no gradient entry is zero by construction
    outputs = keras.layers.Dense(1, dtype="float32")(hidden)
    return keras.Model(inputs, outputs)


def zero_share(scaled: bool) -> float:
    keras.utils.set_random_seed(0)
    model = build_model()
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01))
    optimizer.build(model.trainable_variables)
    x = np.random.rand(4, 8).astype("float32")
    y = np.random.rand(4, 1).astype("float32")

    def loss_of(trainable, non_trainable, optimizer_variables):
        predictions, _ = model.stateless_call(trainable, non_trainable, x)
        loss = keras.ops.mean(keras.ops.square(predictions - y)) * 1e-8  # a small loss: its float16 gradients underflow
        if not scaled:
            return loss
        with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_variables))):
            return optimizer.scale_loss(loss)

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    optimizer_variables = [v.value for v in optimizer.variables]
    grads = jax.grad(loss_of)(trainable, non_trainable, optimizer_variables)
    first = np.asarray(grads[0], dtype=np.float32)
    return float(np.mean(first == 0.0))


if __name__ == "__main__":
    print(sys.argv[1], zero_share(sys.argv[1] == "scaled"))
