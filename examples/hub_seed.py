"""The first report mpdoctor was built from: a TF Hub feature extractor under mixed_float16.

The original script fails at build with "Could not find matching concrete function to call loaded from the
SavedModel ... dtype=float16". This is the version with the fix the report accepted: a Lambda cast to float32
before the hub layer, and a float32 classifier. On tf_keras it still fails the same way, because the hub layer
autocasts its input back to float16. The fix is dtype="float32" on the hub layer.

    mpdoctor check examples/hub_seed.py
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # hub.KerasLayer needs tf_keras (Keras 2) on TF >= 2.16

import tensorflow as tf  # noqa: E402
import tensorflow_hub as hub  # noqa: E402

IMAGE_SIZE = (224, 224)
class_names = ["cat", "dog"]

tf.keras.mixed_precision.set_global_policy("mixed_float16")

# The report used https://tfhub.dev/google/imagenet/resnet_v1_50/feature_vector/5; this offline stand-in is a
# float32-only SavedModel like it (examples/make_savedmodel.py).
model_handle = os.environ.get("MODEL_HANDLE", os.path.join(os.path.dirname(__file__), "savedmodels",
                                                           "feature_extractor"))
do_fine_tuning = False
model = tf.keras.Sequential([
    tf.keras.layers.InputLayer(input_shape=IMAGE_SIZE + (3,)),
    tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),
    hub.KerasLayer(model_handle, trainable=do_fine_tuning),
    tf.keras.layers.Dropout(rate=0.2),
    tf.keras.layers.Dense(len(class_names),
                          kernel_regularizer=tf.keras.regularizers.l2(0.0001),
                          dtype=tf.float32),
])
model.build((None,) + IMAGE_SIZE + (3,))
model.summary()
