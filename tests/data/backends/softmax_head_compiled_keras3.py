# `mpdoctor plan` on every Keras 3 backend (issue 36): a compiled model whose softmax head computes in float16
# under mixed_float16 (MP401). The plan keeps that one layer in float32 on TensorFlow, JAX and PyTorch alike; its
# training step (the compiled loss, the LossScaleOptimizer compile() creates) loses no gradient.
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


def build_model():
    inputs = keras.Input((32,))
    hidden = keras.layers.Dense(64, activation="relu")(inputs)
    hidden = keras.layers.Dense(64, activation="relu")(hidden)
    outputs = keras.layers.Dense(10, activation="softmax")(hidden)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


model = build_model()
