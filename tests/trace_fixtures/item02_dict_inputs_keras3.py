# Item 2: a text model that takes a dict of named inputs, like every keras-hub text model. Fed a list (the old
# sample) Keras 3 refuses the call; ids beyond an Embedding's vocabulary fail the lookup (segment ids must stay
# below 2). The sample must follow the dict, each input's dtype and each Embedding's vocabulary, so the numerics
# run; nothing is reported.
# fixture-codes: MP404 MP405 MP402 MP001
import sys

import numpy as np
import tensorflow as tf
import keras


class MaskedMean(keras.layers.Layer):
    def call(self, x, mask):
        weights = tf.cast(mask, x.dtype)[..., None]
        return tf.reduce_sum(x * weights, axis=1) / tf.reduce_sum(weights, axis=1)


keras.mixed_precision.set_global_policy("mixed_float16")
token_ids = keras.Input((None,), dtype="int32", name="token_ids")
segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
embedded = keras.layers.Add()([keras.layers.Embedding(1000, 16)(token_ids), keras.layers.Embedding(2, 16)(segment_ids)])
pooled = MaskedMean()(embedded, padding_mask)
logits = keras.layers.Dense(2)(pooled)
outputs = keras.layers.Activation("softmax", dtype="float32")(logits)
model = keras.Model({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}, outputs)

if __name__ == "__main__":  # ground truth: `python FILE list ids segments`: does that batch run?
    ids = np.random.default_rng(0).integers(0, 1000, (2, 8)).astype("int32")
    ones = np.ones((2, 8), "int32")
    batches = {
        "list": [ids, ones, ones],
        "ids": {"token_ids": ids, "segment_ids": ones, "padding_mask": ones},
        "segments": {"token_ids": ids, "segment_ids": ids, "padding_mask": ones},
    }
    for name in sys.argv[1:]:
        try:
            print(name, bool(np.isfinite(model(batches[name])).all()))
        except Exception as exc:
            print(name, "raises", type(exc).__name__)
