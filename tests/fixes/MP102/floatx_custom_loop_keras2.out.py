# fix-options: --unsafe-fixes
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([keras.layers.Dense(32, activation="relu", input_shape=(8,)), keras.layers.Dense(1)])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=1e-4))
loss_fn = keras.losses.MeanSquaredError()
dataset = tf.data.Dataset.from_tensor_slices((tf.random.normal((64, 8)), tf.random.normal((64, 1)))).batch(16)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(2):
    for x, y in dataset:
        train_step(tf.cast(x, tf.float16), tf.cast(y, tf.float16))
