"""RetinaNet heads on a backbone's pyramid (reduced: two pyramid levels, no anchors/NMS layers)."""

from tensorflow import keras


def default_classification_model(num_classes, num_anchors=9, pyramid_feature_size=64, name="classification_submodel"):
    inputs = keras.layers.Input(shape=(None, None, pyramid_feature_size))
    outputs = inputs
    for i in range(2):
        outputs = keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="pyramid_classification_{}".format(i))(outputs)
    outputs = keras.layers.Conv2D(num_classes * num_anchors, 3, padding="same", name="pyramid_classification")(outputs)
    outputs = keras.layers.Reshape((-1, num_classes), name="pyramid_classification_reshape")(outputs)
    outputs = keras.layers.Activation("sigmoid", name="pyramid_classification_sigmoid")(outputs)
    return keras.models.Model(inputs=inputs, outputs=outputs, name=name)


def default_regression_model(num_values=4, num_anchors=9, pyramid_feature_size=64, name="regression_submodel"):
    inputs = keras.layers.Input(shape=(None, None, pyramid_feature_size))
    outputs = keras.layers.Conv2D(num_anchors * num_values, 3, padding="same", name="pyramid_regression")(inputs)
    outputs = keras.layers.Reshape((-1, num_values), name="pyramid_regression_reshape")(outputs)
    return keras.models.Model(inputs=inputs, outputs=outputs, name=name)


def __create_pyramid_features(backbone_layers, feature_size=64):
    C3, C4 = backbone_layers
    P4 = keras.layers.Conv2D(feature_size, 1, name="C4_reduced")(C4)
    P4_up = keras.layers.UpSampling2D(name="P4_upsampled")(P4)
    P3 = keras.layers.Conv2D(feature_size, 1, name="C3_reduced")(C3)
    P3 = keras.layers.Add(name="P3_merged")([P4_up, P3])
    return [P3, P4]


def retinanet(inputs, backbone_layers, num_classes, name="retinanet"):
    features = __create_pyramid_features(backbone_layers)
    submodels = [("regression", default_regression_model()), ("classification", default_classification_model(num_classes))]
    pyramids = [
        keras.layers.Concatenate(axis=1, name=n)([model(f) for f in features]) for n, model in submodels
    ]
    return keras.models.Model(inputs=inputs, outputs=pyramids, name=name)
