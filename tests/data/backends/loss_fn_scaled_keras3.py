# The twin of loss_fn_no_scaling_keras3.py with loss scaling (issue 36): a LossScaleOptimizer at module level, whose
# scale_loss() the step applies before differentiating and whose apply() divides the gradients by the scale: the
# scaled float16 gradients survive and the kernel moves. No MP504 on any backend.
# `python FILE` runs one step for real on the backend it is on and prints whether the output layer's kernel moved.
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
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))


def train_step(x, y):
    """One step written for the backend: JAX's jax.grad and stateless_apply, PyTorch's backward() and apply()."""
    optimizer.build(model.trainable_variables)
    if keras.config.backend() == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]

        def loss_of(trainable):
            predictions, _ = model.stateless_call(trainable, non_trainable, x)
            return optimizer.scale_loss(loss_fn(y, predictions))

        grads = jax.grad(loss_of)(trainable)
        state = [v.value for v in optimizer.variables]
        trainable, state = optimizer.stateless_apply(state, grads, trainable)
        for variable, value in zip([*model.trainable_variables, *optimizer.variables], [*trainable, *state]):
            variable.assign(value)
        return
    loss = optimizer.scale_loss(loss_fn(y, model(x, training=True)))
    loss.backward()
    optimizer.apply([v.value.grad for v in model.trainable_variables], model.trainable_variables)


if __name__ == "__main__":  # ground truth: does one step move the output layer's kernel?
    before = keras.ops.convert_to_numpy(model.layers[1].kernel)
    train_step(np.random.default_rng(0).random((2, 64)).astype("float32"), np.zeros((2, 4096), "float32"))
    print("moved", bool(np.any(keras.ops.convert_to_numpy(model.layers[1].kernel) != before)))
