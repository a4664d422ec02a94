# fix-options: --unsafe-fixes
"""A Keras 3 transformer block with a hand-written RMSNorm and an additive attention mask."""
import keras
import numpy as np
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class RMSNorm(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.eps = 1e-12

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

    def call(self, x):
        var = ops.mean(ops.square(x), axis=-1, keepdims=True)
        return x * ops.rsqrt(var + self.eps) * self.scale


class MaskedPool(layers.Layer):
    def call(self, x, mask):
        scores = ops.sum(x, axis=-1)
        scores = scores + (1.0 - mask) * -1e9
        weights = ops.softmax(scores, axis=-1)
        norm = ops.sqrt(ops.maximum(ops.sum(x * x, axis=-1, keepdims=True), 1e-12))
        return ops.sum((x / norm) * weights[..., None], axis=1)


inputs = keras.Input((10, 16))
mask = keras.Input((10,))
h = RMSNorm()(layers.Dense(16)(inputs))
pooled = MaskedPool()(h, mask)
outputs = layers.Dense(3, activation="softmax", dtype="float32")(pooled)
model = keras.Model([inputs, mask], outputs)

if __name__ == "__main__":
    m = np.ones((2, 10), "float32")
    m[:, 5:] = 0.0
    out = model.predict([np.zeros((2, 10, 16), "float32"), m], verbose=0)
    print("finite:", np.isfinite(out).all())
