# fix-options: --unsafe-fixes
"""Keras 3 on PyTorch: a LossScaleOptimizer, whose apply() divides the gradients by the loss scale, applies the
gradients of a loss it never scaled: they flush in float16. The fix differentiates optimizer.scale_loss(loss).
Ground truth (KERAS_BACKEND=torch, tests/test_backend_fixes.py): `python FILE` prints the share of the float16
kernel's entries one step moves: 0.0 here; fixed, all or nearly all (a float16 tanh unit can saturate)."""
import numpy as np
import torch
import keras

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                          keras.layers.Dense(1, dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1e6))


def train_step(x, y):
    model.zero_grad()
    loss = keras.ops.mean(keras.ops.square(model(x, training=True) - y)) * 1e-8
    loss.backward()
    grads = [v.value.grad for v in model.trainable_variables]
    with torch.no_grad():
        optimizer.apply(grads, model.trainable_variables)


if __name__ == "__main__":
    before = keras.ops.convert_to_numpy(model.trainable_variables[0])
    x = np.random.RandomState(0).rand(32, 8).astype("float32")
    train_step(torch.tensor(x), torch.tensor(np.random.RandomState(1).rand(32, 1).astype("float32")))
    print("moved", float(np.mean(before != keras.ops.convert_to_numpy(model.trainable_variables[0]))))
