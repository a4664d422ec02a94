"""A ResNet-like backbone with the shared head."""

from tensorflow import keras

from keras_cv_attention_models.common_layers import batchnorm_with_activation, conv2d_no_bias, output_block


def AotNet(num_blocks, out_channels=(64, 128, 256, 512), input_shape=(224, 224, 3), num_classes=1000, activation="relu",
           drop_rate=0, classifier_activation="softmax", model_name="aotnet", **kwargs):
    inputs = keras.layers.Input(input_shape)
    nn = conv2d_no_bias(inputs, 64, 7, strides=2, name="stem_")
    nn = batchnorm_with_activation(nn, activation=activation, name="stem_")
    for stack_id, (blocks, channels) in enumerate(zip(num_blocks, out_channels)):
        for block_id in range(blocks):
            strides = 2 if block_id == 0 and stack_id > 0 else 1
            name = "stack{}_block{}_".format(stack_id + 1, block_id + 1)
            nn = conv2d_no_bias(nn, channels, 3, strides=strides, name=name)
            nn = batchnorm_with_activation(nn, activation=activation, name=name)
    nn = output_block(nn, num_classes=num_classes, drop_rate=drop_rate, classifier_activation=classifier_activation)
    return keras.models.Model(inputs, nn, name=model_name)


def AotNet50(input_shape=(224, 224, 3), num_classes=1000, **kwargs):
    return AotNet([3, 4, 6, 3], input_shape=input_shape, num_classes=num_classes, model_name="aotnet50", **kwargs)


def AotNet101(input_shape=(224, 224, 3), num_classes=1000, **kwargs):
    return AotNet([3, 4, 23, 3], input_shape=input_shape, num_classes=num_classes, model_name="aotnet101", **kwargs)
