"""MobileNet backbone (reduced to two strided stages standing in for keras.applications.mobilenet)."""

from tensorflow import keras

from . import Backbone
from . import retinanet


class MobileNetBackbone(Backbone):
    allowed_backbones = ["mobilenet128", "mobilenet160", "mobilenet192", "mobilenet224"]

    def retinanet(self, *args, **kwargs):
        return mobilenet_retinanet(*args, backbone=self.backbone, **kwargs)

    def validate(self):
        backbone = self.backbone.split("_")[0]
        if backbone not in MobileNetBackbone.allowed_backbones:
            raise ValueError("Backbone ('{}') not in allowed backbones ({}).".format(backbone, MobileNetBackbone.allowed_backbones))


def mobilenet_retinanet(num_classes, backbone="mobilenet224_1.0", inputs=None, **kwargs):
    if inputs is None:
        inputs = keras.layers.Input((64, 64, 3))
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="conv_pw_5_relu")(inputs)
    c3 = keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu", name="conv_pw_11_relu")(x)
    c4 = keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu", name="conv_pw_13_relu")(c3)
    return retinanet.retinanet(inputs=inputs, num_classes=num_classes, backbone_layers=[c3, c4], **kwargs)
