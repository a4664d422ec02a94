# Residuals of about 1e-5 regressed with MSE averaged over 4096 outputs: the loss's gradient per output is about
# 5e-9, below float16's smallest subnormal (6e-8), so under mixed_float16 without loss scaling every gradient is 0.
import tf_keras as keras
import numpy as np
import tensorflow as tf

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


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


if __name__ == "__main__":  # ground truth: does one step move the output layer's weights?
    before = model.layers[1].kernel.numpy()
    train_step(np.random.default_rng(0).random((2, 64)).astype("float32"), np.zeros((2, 4096), "float32"))
    print("moved", bool(np.any(model.layers[1].kernel.numpy() != before)))
