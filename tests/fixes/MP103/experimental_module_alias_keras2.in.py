import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf
from tensorflow.keras.mixed_precision import experimental as mixed_precision

policy = mixed_precision.Policy("mixed_float16")
mixed_precision.set_policy(policy)
print("Compute dtype:", policy.compute_dtype, "Variable dtype:", policy.variable_dtype)

model = tf.keras.Sequential([
    tf.keras.layers.Dense(256, activation="relu", input_shape=(784,)),
    tf.keras.layers.Dense(10),
    tf.keras.layers.Activation("softmax", dtype="float32"),
])
opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.RMSprop(), loss_scale="dynamic")
model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, metrics=["accuracy"])
