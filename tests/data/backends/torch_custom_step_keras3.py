# A PyTorch custom training step under mixed_float16 (issue 36), run for real by tests/test_backend_trace.py: without
# loss scaling `loss.backward()` leaves the float16 gradients of a small loss all zero; with the LossScaleOptimizer's
# `scale_loss(loss).backward()` they survive. `python FILE scaled|unscaled` prints the share of the first kernel's
# gradient entries that are zero. The trace imports the file (the step under `__main__` does not run).
import sys

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
    predictions = model(x, training=True)
    loss = keras.ops.mean(keras.ops.square(predictions - keras.ops.convert_to_tensor(y))) * 1e-8  # a small loss
    (optimizer.scale_loss(loss) if scaled else loss).backward()
    first = model.trainable_variables[0].value.grad
    return float(np.mean(first.detach().cpu().float().numpy() == 0.0))


if __name__ == "__main__":
    print(sys.argv[1], zero_share(sys.argv[1] == "scaled"))
