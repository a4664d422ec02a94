# Item 11: tf_keras Normalization built under a float16 policy stores its mean and variance as float16 constants;
# the float32 reference run of the numerics must still run (it cast them to float32), so the numerics are not
# skipped and nothing is reported.
# fixture-codes: MP404 MP405 MP001
import numpy as np
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
inputs = keras.Input((4,))
normalized = keras.layers.Normalization(mean=[1.0, 2.0, 3.0, 4.0], variance=[1.0, 4.0, 9.0, 16.0])(inputs)
hidden = keras.layers.Dense(8, activation="relu")(normalized)
outputs = keras.layers.Dense(2, dtype="float32")(hidden)
model = keras.Model(inputs, outputs)

if __name__ == "__main__":  # ground truth: the constants really are float16, and the model runs
    layer = model.layers[1]
    print("constants", layer.mean.dtype.name, layer.variance.dtype.name)
    print("finite", bool(np.isfinite(model(np.ones((2, 4), "float32"))).all()))
