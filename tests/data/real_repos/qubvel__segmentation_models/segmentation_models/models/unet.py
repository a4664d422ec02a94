"""U-Net decoder on a backbone's skip connections (reduced)."""

from ..backbones.backbones_factory import Backbones


def Unet(backbone_name="vgg16", input_shape=(None, None, 3), classes=1, activation="sigmoid", encoder_weights="imagenet", decoder_filters=(32, 16, 8), **kwargs):
    layers, models = kwargs["layers"], kwargs["models"]
    backbone = Backbones.get_backbone(backbone_name, input_shape=input_shape, weights=encoder_weights, **kwargs)
    skips = [backbone.get_layer(name).output for name in Backbones.get_feature_layers(backbone_name)]
    x = backbone.output
    for filters, skip in zip(decoder_filters, skips):
        x = layers.UpSampling2D(name="decoder_stage_up_%d" % filters)(x)
        x = layers.Concatenate()([x, skip])
        x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    x = layers.Conv2D(classes, 3, padding="same", name="final_conv")(x)
    x = layers.Activation(activation, name=activation)(x)
    return models.Model(backbone.input, x)
