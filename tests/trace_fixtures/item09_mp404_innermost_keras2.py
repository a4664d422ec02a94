# Item 9 (tf_keras): MP404 points at the op that first went non-finite, inside the innermost custom layer that ran it, not at
# the class line of the outer custom layer the model holds. `ScaledScores` squares its input into float16's
# overflow (300**2 = 90000 > 65504); `AttentionBlock` only calls it. The built-in Dense before them is finite.
# fixture-codes: MP404 MP001
import numpy as np
import tf_keras as keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


class ScaledScores(keras.layers.Layer):
    def call(self, x):
        scaled = x * 300.0
        return tf.square(scaled)  # expect: MP404


class AttentionBlock(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scores = ScaledScores()

    def call(self, x):
        return self.scores(x) + 1.0


inputs = keras.Input((4,))
hidden = keras.layers.Dense(4, kernel_initializer="ones", bias_initializer="zeros")(inputs)
outputs = keras.layers.Activation("linear", dtype="float32")(AttentionBlock()(hidden))
model = keras.Model(inputs, outputs)

if __name__ == "__main__":  # ground truth: float16 overflows, float32 with the same weights does not
    x = np.ones((2, 4), "float32")
    print("float16_finite", bool(np.isfinite(np.asarray(model(x))).all()))
    keras.mixed_precision.set_global_policy("float32")
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(4, kernel_initializer="ones", bias_initializer="zeros")(inputs)
    reference = keras.Model(inputs, AttentionBlock()(hidden))
    print("float32_finite", bool(np.isfinite(np.asarray(reference(x))).all()))
