"""EfficientNet feature extractor, local to this repository (reduced: a stem and two MBConv-like stages)."""

from utils import get_submodules_from_kwargs

BASE_WEIGHTS_PATH = "https://github.com/Callidior/keras-applications/releases/download/efficientnet/"
WEIGHTS_HASHES = {}


def EfficientNet(width_coefficient, depth_coefficient, default_resolution, input_tensor=None, freeze_bn=False, **kwargs):
    backend, layers, models, keras_utils = get_submodules_from_kwargs(kwargs)
    x = layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False, name="stem_conv")(input_tensor)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.Activation("swish", name="stem_activation")(x)
    features = []
    for i, filters in enumerate((24, 40)):
        x = layers.DepthwiseConv2D(3, strides=2, padding="same", name="block%d_dwconv" % (i + 3))(x)
        x = layers.Conv2D(filters, 1, padding="same", name="block%d_project_conv" % (i + 3))(x)
        features.append(x)
    return features


def EfficientNetB0(input_tensor=None, freeze_bn=False, **kwargs):
    return EfficientNet(1.0, 1.0, 224, input_tensor=input_tensor, freeze_bn=freeze_bn, **kwargs)


def preprocess_input(x, **kwargs):
    return x / 255.0
