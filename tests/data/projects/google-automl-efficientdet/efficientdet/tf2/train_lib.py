# Abridged excerpt (see SOURCE.md): google/automl efficientdet/tf2/train_lib.py.
from tf2 import efficientdet_keras


class EfficientDetNetTrain(efficientdet_keras.EfficientDetNet):
    """A customized trainer for EfficientDet."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
