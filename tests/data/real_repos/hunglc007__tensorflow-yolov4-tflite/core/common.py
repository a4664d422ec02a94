import tensorflow as tf


class BatchNormalization(tf.keras.layers.BatchNormalization):
    """Frozen state and inference state are the same: `training=False` when the layer is frozen."""

    def call(self, x, training=False):
        if not training:
            training = tf.constant(False)
        training = tf.logical_and(training, self.trainable)
        return super().call(x, training)


def convolutional(input_layer, filters_shape, downsample=False, activate=True, bn=True, activate_type="leaky"):
    if downsample:
        input_layer = tf.keras.layers.ZeroPadding2D(((1, 0), (1, 0)))(input_layer)
        padding, strides = "valid", 2
    else:
        padding, strides = "same", 1
    conv = tf.keras.layers.Conv2D(filters=filters_shape[-1], kernel_size=filters_shape[0], strides=strides, padding=padding, use_bias=not bn, kernel_regularizer=tf.keras.regularizers.l2(0.0005))(input_layer)
    if bn:
        conv = BatchNormalization()(conv)
    if activate:
        conv = tf.nn.leaky_relu(conv, alpha=0.1) if activate_type == "leaky" else conv * tf.math.tanh(tf.math.softplus(conv))
    return conv


def upsample(input_layer):
    return tf.image.resize(input_layer, (input_layer.shape[1] * 2, input_layer.shape[2] * 2), method="bilinear")
