# fix-options: --target-tensorflow >=2.16
# Ported from a tf_keras custom training loop: the LossScaleOptimizer API changed in Keras 3.
import keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
        scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
    gradients = optimizer.get_unscaled_gradients(scaled_gradients)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss
