"""Keras 3: MirroredStrategy (one device on CPU), the model and optimizer made in its scope, strategy.run."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 32

with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))


def replica_step(x, y):
    with tf.GradientTape() as tape:
        per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def distributed_train_step(x, y):
    losses = strategy.run(replica_step, args=(x, y))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


rng = np.random.RandomState(0)
x_batch = rng.normal(size=(GLOBAL_BATCH, 8)).astype("float32")
y_batch = rng.normal(size=(GLOBAL_BATCH, 1)).astype("float32")

if __name__ == "__main__":
    for _ in range(3):
        distributed_train_step(x_batch, y_batch)
