import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf  # noqa: E402

tf.keras.mixed_precision.set_global_policy("mixed_float16")


def make_model(vocab_size=20000, maxlen=200, num_classes=4):
    inputs = tf.keras.layers.Input(shape=(maxlen,))
    x = tf.keras.layers.Embedding(vocab_size, 128)(inputs)
    x = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(64))(x)
    x = tf.keras.layers.Dense(num_classes)(x)
    out = tf.keras.layers.Activation("softmax", name="probs")(x)
    return tf.keras.Model(inputs=inputs, outputs=[out])


model = make_model()
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
