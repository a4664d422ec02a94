name = "keras_unet"

__version__ = "0.1.2"

from distutils.version import LooseVersion

# if tensorflow 2.x is present use tf.keras instead of Keras
try:
    from tensorflow import __version__ as TF_VERSION

    TF = LooseVersion(TF_VERSION) >= LooseVersion("2.0.0")
except ImportError:
    TF = False
if TF:
    print("keras-unet init: TF version is >= 2.0.0 - using `tf.keras` instead of `Keras`")
else:
    print("keras-unet init: TF version is < 2.0.0 or not present - using `Keras` instead of `tf.keras`")

from . import metrics, models, utils  # noqa: E402,F401
