# fix-options: --unsafe-fixes
"""tf_keras under policy float16: TF-format weights fail to load into float16 variables; .h5 casts silently;
mixed_float16 variables are float32."""
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("float16")

inputs = keras.Input(shape=(28, 28, 1))
x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
x = keras.layers.Flatten()(x)
outputs = keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
model = keras.Model(inputs, outputs)

model.load_weights("checkpoints/mnist_fp32")
model.load_weights("checkpoints/mnist_fp32.h5")

checkpoint = tf.train.Checkpoint(model=model, optimizer=keras.optimizers.Adam())
status = checkpoint.restore("checkpoints/ckpt-5")
