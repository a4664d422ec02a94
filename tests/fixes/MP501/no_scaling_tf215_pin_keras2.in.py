# fix-options: --unsafe-fixes --target-tensorflow >=2.12,<2.16
# tf.keras on a TF 2.12-2.15 target is Keras 2: the fix spells tf_keras loss scaling (get_scaled_loss and
# get_unscaled_gradients; apply_gradients does not unscale there).
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4, dtype="float32")])
optimizer = tf.keras.optimizers.Adam()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
