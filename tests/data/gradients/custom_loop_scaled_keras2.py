# The same loop with a tf_keras LossScaleOptimizer: get_scaled_loss inside the tape, get_unscaled_gradients after.
import numpy as np
import tensorflow as tf
import tf_keras as keras

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
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


if __name__ == "__main__":  # ground truth: does one step move the output layer's weights?
    before = model.layers[1].kernel.numpy()
    train_step(np.random.default_rng(0).random((2, 64)).astype("float32"), np.zeros((2, 4096), "float32"))
    print("moved", bool(np.any(model.layers[1].kernel.numpy() != before)))
