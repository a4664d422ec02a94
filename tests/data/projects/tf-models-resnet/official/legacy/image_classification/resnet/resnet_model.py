# Abridged excerpt (see SOURCE.md): tensorflow/models official/legacy/image_classification/resnet/resnet_model.py
# (the stem and head; the residual stages are left out).
import tensorflow as tf

layers = tf.keras.layers


def resnet50(num_classes, batch_size=None, use_l2_regularizer=True):
    img_input = layers.Input(shape=(224, 224, 3), batch_size=batch_size)
    x = layers.Conv2D(64, (7, 7), strides=(2, 2), padding="valid", use_bias=False, name="conv1")(img_input)
    x = layers.BatchNormalization(name="bn_conv1")(x)
    x = layers.Activation("relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(num_classes, name="fc1000")(x)
    # A softmax activation is added to the model, and the model is compiled in float32 under mixed precision.
    x = layers.Activation("softmax", dtype="float32")(x)
    return tf.keras.Model(img_input, x, name="resnet50")
