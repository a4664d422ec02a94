import tensorflow as tf
from tensorflow.keras import layers, models


def get_resnet_backbone():
    # reduced: a small conv stack stands in for tf.keras.applications.ResNet50(include_top=False, weights=None)
    base_model = tf.keras.Sequential([layers.Conv2D(32, 3, strides=2, activation="relu"), layers.Conv2D(64, 3, strides=2, activation="relu")])
    base_model.trainable = True
    inputs = layers.Input((None, None, 3))
    h = base_model(inputs, training=True)
    h = layers.GlobalAveragePooling2D()(h)
    return models.Model(inputs, h)


def get_projection_prototype(dense_1=1024, dense_2=96, prototype_dimension=10):
    inputs = layers.Input((64,))
    projection_1 = layers.Dense(dense_1)(inputs)
    projection_1 = layers.BatchNormalization()(projection_1)
    projection_1 = layers.Activation("relu")(projection_1)
    projection_2 = layers.Dense(dense_2)(projection_1)
    projection_2_normalize = tf.math.l2_normalize(projection_2, axis=1, name="projection")
    prototype = layers.Dense(prototype_dimension, use_bias=False, name="prototype")(projection_2_normalize)
    return models.Model(inputs=inputs, outputs=[projection_2_normalize, prototype])
