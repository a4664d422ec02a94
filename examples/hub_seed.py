"""The first report mpdoctor was built from: a TF Hub feature extractor under mixed_float16.

It fails at build with "Could not find matching concrete function to call loaded from the SavedModel ...
dtype=float16" (tf_keras; TF >= 2.16 without TF_USE_LEGACY_KERAS=1 fails even earlier: a hub.KerasLayer is not a
Keras 3 layer). The fix accepted in the report (a Lambda cast to float32 before the hub layer) does not help: the hub
layer autocasts its input back to float16. The fix is dtype="float32" on the hub layer.

    mpdoctor check examples/hub_seed.py
"""

import os

import tensorflow as tf
import tensorflow_hub as hub

IMAGE_SIZE = (224, 224)
class_names = ["cat", "dog"]

tf.keras.mixed_precision.set_global_policy("mixed_float16")

model_handle = os.environ.get("MODEL_HANDLE", "https://tfhub.dev/google/imagenet/resnet_v1_50/feature_vector/5")
do_fine_tuning = False
model = tf.keras.Sequential([
    tf.keras.layers.InputLayer(input_shape=IMAGE_SIZE + (3,)),
    # the accepted answer's "fix": undone by the hub layer's own autocast
    tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),
    hub.KerasLayer(model_handle, trainable=do_fine_tuning),
    tf.keras.layers.Dropout(rate=0.2),
    tf.keras.layers.Dense(len(class_names), activation="softmax",
                          kernel_regularizer=tf.keras.regularizers.l2(0.0001)),
])
model.build((None,) + IMAGE_SIZE + (3,))
model.summary()
