"""ConvNeXt in Keras (reduced: stem, one block per stage and smaller default widths, so a CPU builds it quickly)."""

import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers


class Block(tf.keras.Model):
    """ConvNeXt block: depthwise conv, LayerNorm, pointwise MLP, layer scale."""

    def __init__(self, dim, drop_path=0.0, layer_scale_init_value=1e-6, **kwargs):
        super(Block, self).__init__(**kwargs)
        self.dim = dim
        self.gamma = tf.Variable(layer_scale_init_value * tf.ones((dim,))) if layer_scale_init_value > 0 else None
        self.dw_conv_1 = layers.Conv2D(filters=dim, kernel_size=7, padding="same", groups=dim)
        self.layer_norm = layers.LayerNormalization(epsilon=1e-6)
        self.pw_conv_1 = layers.Dense(4 * dim)
        self.act_fn = layers.Activation("gelu")
        self.pw_conv_2 = layers.Dense(dim)

    def call(self, inputs):
        x = self.pw_conv_2(self.act_fn(self.pw_conv_1(self.layer_norm(self.dw_conv_1(inputs)))))
        if self.gamma is not None:
            x = self.gamma * x
        return inputs + x


def get_convnext_model(model_name="convnext_tiny_1k", input_shape=(32, 32, 3), num_classes=1000, depths=[1, 1, 1, 1], dims=[8, 16, 32, 64], drop_path_rate=0.0, layer_scale_init_value=1e-6) -> keras.Model:
    inputs = layers.Input(input_shape)
    stem = keras.Sequential([layers.Conv2D(dims[0], kernel_size=4, strides=4), layers.LayerNormalization(epsilon=1e-6)], name="stem")
    downsample_layers = [stem]
    for i in range(3):
        downsample_layers.append(keras.Sequential([layers.LayerNormalization(epsilon=1e-6), layers.Conv2D(dims[i + 1], kernel_size=2, strides=2)], name=f"downsampling_block_{i}"))
    stages = [keras.Sequential([Block(dim=dims[i], layer_scale_init_value=layer_scale_init_value, name=f"convnext_block_{i}_{j}") for j in range(depths[i])], name=f"convnext_stage_{i}") for i in range(4)]
    x = inputs
    for i in range(len(stages)):
        x = stages[i](downsample_layers[i](x))
    x = layers.GlobalAvgPool2D()(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    outputs = layers.Dense(num_classes, name="classification_head")(x)
    return keras.Model(inputs, outputs, name=model_name)
