"""Golden input: float16 outputs and losses (MP401 trace form, MP402, MP503 on tf_keras), a subclassed model."""
import numpy as np
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")

inputs = keras.Input((8,))
model = keras.Model(inputs, keras.layers.Dense(4, name="head")(inputs))
model.compile(optimizer="adam", loss="mse")

inputs = keras.Input((8,))
classifier = keras.Model(inputs, keras.layers.Dense(3, activation="sigmoid", name="probs")(inputs))


class Tower(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(5, activation="softmax")

    def call(self, x):
        return self.out(self.hidden(x))


tower = Tower()
tower(np.ones((2, 6), "float32"))
inputs = keras.Input((3,), dtype="float64")
wide = keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(inputs))
