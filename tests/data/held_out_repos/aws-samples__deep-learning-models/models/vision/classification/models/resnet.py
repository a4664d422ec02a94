"""ResNet50 v1 variants returning logits (the softmax is applied by the loss)."""

import tensorflow as tf

layers = tf.keras.layers


def ResNet50V1_b(weights=None, weight_decay=1e-4, classes=1000):
    regularizer = tf.keras.regularizers.l2(weight_decay)
    inputs = layers.Input(shape=(224, 224, 3))
    x = layers.Conv2D(64, 7, strides=2, padding="same", use_bias=False, kernel_regularizer=regularizer)(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    for filters, strides in ((256, 1), (512, 2), (1024, 2), (2048, 2)):
        x = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False, kernel_regularizer=regularizer)(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    logits = layers.Dense(classes, kernel_regularizer=regularizer, name="fc1000")(x)
    return tf.keras.Model(inputs, logits, name="resnet50v1_b")
