# fix-options: --unsafe-fixes --target-tensorflow >=2.16
# The same loop on a TF >= 2.16 target, where tf.keras is Keras 3: the fix spells Keras 3 loss scaling
# (scale_loss; apply_gradients unscales).
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4, dtype="float32")])
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
