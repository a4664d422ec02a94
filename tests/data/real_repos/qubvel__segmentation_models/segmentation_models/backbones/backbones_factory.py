"""Backbones (reduced: the classification_models/efficientnet zoo stood in for by one small encoder)."""


class BackbonesFactory:
    _default_feature_layers = {"vgg16": ("block3_conv1", "block2_conv1", "block1_conv1")}

    def models_names(self):
        return list(self._default_feature_layers)

    def get_backbone(self, name, input_shape=(None, None, 3), weights=None, include_top=False, **kwargs):
        layers, models = kwargs["layers"], kwargs["models"]
        inputs = layers.Input(input_shape)
        x = inputs
        for i, filters in enumerate((8, 16, 32)):
            x = layers.Conv2D(filters, 3, padding="same", activation="relu", name="block%d_conv1" % (i + 1))(x)
            x = layers.MaxPooling2D(name="block%d_pool" % (i + 1))(x)
        return models.Model(inputs, x, name=name)

    def get_feature_layers(self, name, n=3):
        return self._default_feature_layers[name][:n]

    def get_preprocessing(self, name):
        return lambda x: x / 255.0


Backbones = BackbonesFactory()
