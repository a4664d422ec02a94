# Item 2: when the numerics cannot run for a model that computes in float16, an info finding says why (here: a
# subclassed model that was never built or called has no input shape to build a sample batch from).
# fixture-codes: MP404
import keras


class Classifier(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.out = keras.layers.Dense(3, activation="softmax", dtype="float32")

    def call(self, x):
        return self.out(self.hidden(x))


keras.mixed_precision.set_global_policy("mixed_float16")
model = Classifier()  # expect: MP404
