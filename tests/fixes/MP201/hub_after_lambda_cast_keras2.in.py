# Seed 000, the "fixed" version from the answer: a Lambda cast to float32 before the hub layer.
# It still fails: the hub layer autocasts the float32 tensor back to float16.
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf
import tensorflow_hub as hub

IMAGE_SIZE = (224, 224)

class_names = ['cat', 'dog']

tf.keras.mixed_precision.set_global_policy('mixed_float16')

# local copy of https://tfhub.dev/google/imagenet/resnet_v1_50/feature_vector/5
model_handle = "/tmp/tfhub_models/resnet_v1_50_feature_vector_5"
do_fine_tuning = False
model = tf.keras.Sequential([
    tf.keras.layers.InputLayer(input_shape=IMAGE_SIZE + (3,)),
    # cast to float32 for the TF Hub model's float32 input signature
    tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32)),
    hub.KerasLayer(model_handle, trainable=do_fine_tuning),
    tf.keras.layers.Dropout(rate=0.2),
    # final classifier in float32 for numerical stability
    tf.keras.layers.Dense(len(class_names),
                          kernel_regularizer=tf.keras.regularizers.l2(0.0001),
                          dtype=tf.float32)
])
model.build((None,) + IMAGE_SIZE + (3,))
model.summary()
