"""Keras 3 on PyTorch: the step clips the gradients between backward() and apply(); scaled, they would be clipped
at 1/32768 of the norm meant. Refused."""
# fix-refused: the gradients pass through `torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)` between backward() and optimizer.apply(), which would see them multiplied by the loss scale
import torch
import keras

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                          keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.SGD(0.1)


def train_step(x, y):
    model.zero_grad()
    loss = keras.ops.mean(keras.ops.square(model(x, training=True) - y))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    grads = [v.value.grad for v in model.trainable_variables]
    with torch.no_grad():
        optimizer.apply(grads, model.trainable_variables)
