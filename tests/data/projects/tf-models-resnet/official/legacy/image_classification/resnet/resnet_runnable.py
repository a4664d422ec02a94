# Abridged excerpt (see SOURCE.md): tensorflow/models official/legacy/image_classification/resnet/resnet_runnable.py.
from official.legacy.image_classification.resnet import resnet_model


class ResnetRunnable:
    """Implements the training and evaluation APIs for Resnet model."""

    def __init__(self, flags_obj, time_callback, epoch_steps):
        self.flags_obj = flags_obj
        self.model = resnet_model.resnet50(num_classes=1000, batch_size=flags_obj.batch_size)
