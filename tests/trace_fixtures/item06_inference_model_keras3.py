# Item 6: findings on the models the file trains. A file that compiles its autoencoder at import also builds
# a decoder for inference from the same layers (a new Input: neither model contains the other) and never compiles
# it: its float16 output is what `decoder.predict` returns, and no loss or metric ever reads it, so MP402 ("the
# loss and metrics are then computed in float16") would be false there. The scorer, compiled with a loss, keeps it.
# A `__main__` run with `ground` prints the decoder's output dtype and whether it has a loss (the ground truth).
# fixture-codes: MP401 MP402 MP503
import sys

import numpy as np
import keras

keras.mixed_precision.set_global_policy("mixed_float16")

inputs = keras.Input((8,))
encoded = keras.layers.Dense(4)(inputs)
decoder_hidden = keras.layers.Dense(16, activation="relu")
decoder_output = keras.layers.Dense(8)
autoencoder = keras.Model(
    inputs, keras.layers.Activation("linear", dtype="float32")(decoder_output(decoder_hidden(encoded)))
)
autoencoder.compile(optimizer="adam", loss="mse")

latent = keras.Input((4,))
decoder = keras.Model(latent, decoder_output(decoder_hidden(latent)), name="decoder")

features = keras.Input((4,))
scorer = keras.Model(features, keras.layers.Dense(1)(features), name="scorer")  # expect: MP402
scorer.compile(optimizer="adam", loss="mse")

if __name__ == "__main__" and "ground" in sys.argv:
    output = decoder(np.ones((2, 4), "float32"))
    print("ground", output.dtype.name, getattr(decoder, "loss", None) is not None)
