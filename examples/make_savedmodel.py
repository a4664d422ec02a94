"""Writes examples/savedmodels/feature_extractor: a tiny float32-only SavedModel standing in for a TF Hub feature
extractor (most TF Hub models accept only float32). The directory is committed; run this to rebuild it.

    python examples/make_savedmodel.py
"""

import os

import tensorflow as tf

TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "savedmodels", "feature_extractor")


class FeatureExtractor(tf.Module):
    def __init__(self):
        super().__init__()
        self.kernel = tf.Variable(tf.random.stateless_normal([3, 8], seed=[1, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, 224, 224, 3], tf.float32)])
    def __call__(self, images):
        return tf.reduce_mean(images, axis=[1, 2]) @ self.kernel


if __name__ == "__main__":
    module = FeatureExtractor()
    tf.saved_model.save(module, TARGET, signatures={"serving_default": module.__call__})
    print(TARGET)
