"""The Keras 3 demo: one file for TensorFlow, JAX and PyTorch (`KERAS_BACKEND=jax mpdoctor check ...`).

A small text classifier written the way Keras examples are, with mixed precision switched on. It breaks in float16
on every backend: the padding's embeddings are zeroed, and the RMS normalisation's `1e-12` is 0 in float16, so a
padded token is normalised as 0 / sqrt(0): NaN, which the pooling spreads to the whole example. The softmax head
computes in float16 too. `python examples/keras3_demo.py` shows it: the padded example's predictions are NaN.
"""

import keras
import numpy as np
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class RMSNorm(layers.Layer):
    def call(self, x):
        return x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + 1e-12)


class MaskedMeanPooling(layers.Layer):
    def call(self, tokens, mask):
        mask = ops.expand_dims(mask, -1)
        return ops.sum(tokens * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)


token_ids = keras.Input((16,), dtype="int32", name="token_ids")
padding_mask = keras.Input((16,), name="padding_mask")
embedded = layers.Embedding(1000, 32)(token_ids) * ops.expand_dims(padding_mask, -1)  # padding zeroed
normed = RMSNorm()(embedded)
pooled = MaskedMeanPooling()(normed, padding_mask)
hidden = layers.Dense(32, activation="relu")(pooled)
outputs = layers.Dense(4, activation="softmax")(hidden)
model = keras.Model([token_ids, padding_mask], outputs)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")

if __name__ == "__main__":
    ids = np.random.RandomState(0).randint(1, 1000, size=(2, 16))
    mask = np.ones((2, 16), "float32")
    mask[1, 12:] = 0.0  # the second example is padded
    print(keras.config.backend(), ops.convert_to_numpy(model.predict([ids, mask], verbose=0)).tolist())
