"""Backbones with an embedding head (reduced: one small backbone stands in for the buildin MobileNet/ResNet list)."""

import tensorflow as tf
from tensorflow import keras


def __init_model_from_name__(name, input_shape=(112, 112, 3), weights=None, **kwargs):
    inputs = keras.layers.Input(input_shape)
    nn = keras.layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(inputs)
    nn = keras.layers.BatchNormalization()(nn)
    nn = keras.layers.PReLU(shared_axes=[1, 2])(nn)
    nn = keras.layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(nn)
    return keras.models.Model(inputs, nn, name=name)


def buildin_models(stem_model, dropout=1, emb_shape=512, input_shape=(112, 112, 3), output_layer="GDC", bn_momentum=0.99, bn_epsilon=0.001, **kwargs):
    xx = __init_model_from_name__(stem_model, input_shape, **kwargs) if isinstance(stem_model, str) else stem_model
    inputs = xx.inputs[0]
    nn = xx.outputs[0]
    nn = keras.layers.DepthwiseConv2D(nn.shape[1], use_bias=False, name="GDC_dw")(nn)
    nn = keras.layers.BatchNormalization(momentum=bn_momentum, epsilon=bn_epsilon, name="GDC_batchnorm")(nn)
    if dropout > 0 and dropout < 1:
        nn = keras.layers.Dropout(dropout)(nn)
    nn = keras.layers.Conv2D(emb_shape, 1, use_bias=True, kernel_initializer="glorot_normal", name="GDC_conv")(nn)
    nn = keras.layers.Flatten(name="GDC_flatten")(nn)
    embedding = keras.layers.BatchNormalization(momentum=bn_momentum, epsilon=bn_epsilon, scale=True, name="pre_embedding")(nn)
    embedding_fp32 = keras.layers.Activation("linear", dtype="float32", name="embedding")(embedding)
    return keras.models.Model(inputs, embedding_fp32, name=xx.name)


class NormDense(keras.layers.Layer):
    def __init__(self, units=1000, loss_top_k=1, **kwargs):
        super().__init__(**kwargs)
        self.units, self.loss_top_k = units, loss_top_k

    def build(self, input_shape):
        self.w = self.add_weight(name="norm_dense_w", shape=(input_shape[-1], self.units * self.loss_top_k), trainable=True)
        super().build(input_shape)

    def call(self, inputs):
        norm_w = tf.nn.l2_normalize(self.w, axis=0)
        norm_inputs = tf.nn.l2_normalize(inputs, axis=1)
        return tf.matmul(norm_inputs, tf.cast(norm_w, norm_inputs.dtype))


def convert_to_mixed_float16(model, convert_batch_norm=False):
    policy = keras.mixed_precision.Policy("mixed_float16")
    policy_config = keras.utils.serialize_keras_object(policy)

    def do_convert_to_mixed_float16(layer):
        if not convert_batch_norm and isinstance(layer, keras.layers.BatchNormalization):
            return layer
        if not isinstance(layer, keras.layers.InputLayer) and not (isinstance(layer, keras.layers.Activation) and layer.activation == keras.activations.linear):
            aa = layer.get_config()
            aa.update({"dtype": policy_config})
            return layer.__class__.from_config(aa)
        return layer

    return keras.models.clone_model(model, clone_function=do_convert_to_mixed_float16)
