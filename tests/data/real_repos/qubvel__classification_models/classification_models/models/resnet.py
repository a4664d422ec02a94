"""ResNet18 (reduced: two residual stages; the SE variants and weight loading left out)."""

from .. import get_submodules_from_kwargs

backend = None
layers = None
models = None
keras_utils = None


def residual_conv_block(filters, stage, block, strides=(1, 1)):
    def layer(input_tensor):
        x = layers.BatchNormalization(name="stage{}_unit{}_bn1".format(stage, block))(input_tensor)
        x = layers.Activation("relu")(x)
        shortcut = layers.Conv2D(filters, (1, 1), strides=strides, name="stage{}_unit{}_sc".format(stage, block))(x)
        x = layers.Conv2D(filters, (3, 3), strides=strides, padding="same", name="stage{}_unit{}_conv1".format(stage, block))(x)
        x = layers.BatchNormalization(name="stage{}_unit{}_bn2".format(stage, block))(x)
        x = layers.Activation("relu")(x)
        x = layers.Conv2D(filters, (3, 3), padding="same", name="stage{}_unit{}_conv2".format(stage, block))(x)
        return layers.Add()([x, shortcut])

    return layer


def ResNet(model_params, input_shape=None, input_tensor=None, include_top=True, classes=1000, weights="imagenet", **kwargs):
    global backend, layers, models, keras_utils
    backend, layers, models, keras_utils = get_submodules_from_kwargs(kwargs)
    img_input = layers.Input(shape=input_shape) if input_tensor is None else input_tensor
    x = layers.Conv2D(16, (7, 7), strides=(2, 2), padding="same", name="conv0")(img_input)
    for stage, filters in enumerate((16, 32)):
        x = residual_conv_block(filters, stage, 0, strides=(1, 1) if stage == 0 else (2, 2))(x)
    x = layers.BatchNormalization(name="bn1")(x)
    x = layers.Activation("relu", name="relu1")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(name="pool1")(x)
        x = layers.Dense(classes, name="fc1")(x)
        x = layers.Activation("softmax", name="softmax")(x)
    return models.Model(img_input, x, name=model_params)


def ResNet18(input_shape=None, input_tensor=None, weights=None, classes=1000, include_top=True, **kwargs):
    return ResNet("resnet18", input_shape=input_shape, input_tensor=input_tensor, include_top=include_top, classes=classes, weights=weights, **kwargs)


def preprocess_input(x, **kwargs):
    return x
