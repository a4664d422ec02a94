# Seed 000 on Keras 3 with the answer's Lambda cast: TFSMLayer still receives float16 at predict time.
import keras
import tensorflow as tf

IMAGE_SIZE = (224, 224)
class_names = ["cat", "dog"]

keras.mixed_precision.set_global_policy("mixed_float16")

model_path = "/tmp/tfhub_models/resnet_v1_50_feature_vector_5"
inputs = keras.Input(shape=IMAGE_SIZE + (3,))
x = keras.layers.Lambda(lambda x: tf.cast(x, tf.float32))(inputs)
features = keras.layers.TFSMLayer(
    model_path, call_endpoint="serving_default", dtype=tf.float32
)(x)["output_0"]
x = keras.layers.Dropout(rate=0.2)(features)
outputs = keras.layers.Dense(len(class_names), kernel_regularizer=keras.regularizers.l2(0.0001),
                             dtype=tf.float32)(x)
model = keras.Model(inputs, outputs)
