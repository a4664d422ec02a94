# MP504 on any Keras 3 backend (issue 36): a model regressed with MSE of residuals ~1e-5 averaged over 4096 outputs,
# a Keras loss object and an optimizer at module level (the step judged is the model and that loss). Under
# mixed_float16 without loss scaling every float16 gradient is ~5e-9, below float16's smallest subnormal: zero.
# `python FILE` runs one step for real on the backend it is on (JAX: jax.grad; PyTorch: backward()) and prints
# whether the output layer's kernel moved.
import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential(
    [
        keras.Input((64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(4096, kernel_initializer=keras.initializers.RandomNormal(stddev=1e-6)),
        keras.layers.Activation("linear", dtype="float32"),
    ]
)
loss_fn = keras.losses.MeanSquaredError()
optimizer = keras.optimizers.SGD(0.1)  # expect: MP504


def train_step(x, y):
    """One step written for the backend: JAX's jax.grad and stateless_apply, PyTorch's backward() and apply()."""
    optimizer.build(model.trainable_variables)
    if keras.config.backend() == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]

        def loss_of(trainable):
            predictions, _ = model.stateless_call(trainable, non_trainable, x)
            return loss_fn(y, predictions)

        grads = jax.grad(loss_of)(trainable)
        trainable, _ = optimizer.stateless_apply([v.value for v in optimizer.variables], grads, trainable)
        for variable, value in zip(model.trainable_variables, trainable):
            variable.assign(value)
        return
    loss = loss_fn(y, model(x, training=True))
    loss.backward()
    optimizer.apply([v.value.grad for v in model.trainable_variables], model.trainable_variables)


if __name__ == "__main__":  # ground truth: does one step move the output layer's kernel?
    before = keras.ops.convert_to_numpy(model.layers[1].kernel)
    train_step(np.random.default_rng(0).random((2, 64)).astype("float32"), np.zeros((2, 4096), "float32"))
    print("moved", bool(np.any(keras.ops.convert_to_numpy(model.layers[1].kernel) != before)))
