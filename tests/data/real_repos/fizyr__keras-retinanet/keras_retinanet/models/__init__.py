import sys


class Backbone(object):
    """Holds what a backbone needs: its name and how to build a RetinaNet on it."""

    def __init__(self, backbone):
        self.backbone = backbone
        self.validate()

    def retinanet(self, *args, **kwargs):
        raise NotImplementedError("retinanet method not implemented.")

    def validate(self):
        raise NotImplementedError("validate method not implemented.")


def backbone(backbone_name):
    """Returns the Backbone object for a backbone name (resnet/mobilenet/...; only mobilenet is kept here)."""
    if "mobilenet" in backbone_name:
        from .mobilenet import MobileNetBackbone as b
    else:
        raise NotImplementedError("Backbone class for  '{}' not implemented.".format(backbone))
    return b(backbone_name)


def load_model(filepath, backbone_name="mobilenet"):
    from tensorflow import keras

    return keras.models.load_model(filepath, custom_objects=backbone(backbone_name).custom_objects)


def assert_training_model(model):
    assert all(output in model.output_names for output in ["regression", "classification"]), (
        "Input is not a training model (no 'regression' and 'classification' outputs were found, outputs are: {}).".format(
            model.output_names
        )
    )


if __name__ == "__main__":
    sys.exit(0)
