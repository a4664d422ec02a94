# Items 6 and 8: helper builders are not models, and a second build names layers as the user's run did.
# `build_classifier()` composes `build_encoder()` and `build_head()`: the helpers' float16 outputs are inner tensors
# of the classifier (whose float16 softmax is the one finding), never models of their own. `build_critic()` is
# used by no other builder: its float16 output is a model's output (the negative case of the helper rule). The
# trace builds the classifier again after the file ran; the softmax layer must keep the name the file's own build
# gave it (what `model.summary()` shows), not the next free one.
# fixture-codes: MP401 MP402 MP001
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


def build_encoder():
    inputs = keras.Input(shape=(8,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    return keras.Model(inputs, hidden, name="encoder")


def build_head():
    inputs = keras.Input(shape=(16,))
    probabilities = keras.layers.Dense(4, activation="softmax")(inputs)  # expect: MP401
    return keras.Model(inputs, probabilities, name="head")


def build_classifier():
    inputs = keras.Input(shape=(8,))
    outputs = build_head()(build_encoder()(inputs))
    model = keras.Model(inputs, outputs, name="classifier")
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    return model


def build_critic():
    inputs = keras.Input(shape=(8,))
    score = keras.layers.Dense(1)(inputs)  # expect: MP402
    return keras.Model(inputs, score, name="critic")


classifier = build_classifier()

if __name__ == "__main__":  # ground truth: the names the user sees, and the helpers' outputs are float16
    classifier.summary()
    print("softmax_layer", classifier.get_layer("head").layers[-1].name)
    print("encoder_output", keras.backend.standardize_dtype(build_encoder().output.dtype))
    print("classifier_output", keras.backend.standardize_dtype(classifier.output.dtype))
