# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Recommendation/WideAndDeep/trainer/model/widedeep.py.
"""The wide (linear) and deep (MLP) parts, joined by tf.keras.experimental.WideDeepModel with a sigmoid."""

import tensorflow as tf


def wide_deep_model(args):
    features = {"numeric": tf.keras.Input(shape=(13,), name="numeric", dtype=tf.float32)}
    wide = tf.keras.layers.Dense(1, name="wide_linear")(features["numeric"])
    dnn = features["numeric"]
    for unit_size in args.deep_hidden_units:
        dnn = tf.keras.layers.Dense(units=unit_size, activation="relu")(dnn)
        dnn = tf.keras.layers.Dropout(rate=args.deep_dropout)(dnn)
    dnn = tf.keras.layers.Dense(units=1)(dnn)
    dnn_model = tf.keras.Model(inputs=features, outputs=dnn)
    linear_model = tf.keras.Model(inputs=features, outputs=wide)
    model = tf.keras.experimental.WideDeepModel(linear_model, dnn_model, activation="sigmoid")
    return model, features
