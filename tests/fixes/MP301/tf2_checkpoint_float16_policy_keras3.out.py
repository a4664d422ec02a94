# fix-options: --unsafe-fixes
"""Keras 3 under the pure float16 policy: tf.train.Checkpoint restores of float32 checkpoints fail ("expected dtype
half does not equal original dtype float"); .weights.h5 casts silently, and a checkpoint the same script wrote
under float16 restores fine."""
import tensorflow as tf
import keras


def build_model():
    return keras.Sequential([
        keras.Input(shape=(16,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(4),
    ])


keras.config.set_dtype_policy("mixed_float16")
model = build_model()

ckpt = tf.train.Checkpoint(model=model)
ckpt.read("/tmp/pretrained_fp32/ckpt-1").assert_existing_objects_matched()

tf.train.Checkpoint(net=model, step=tf.Variable(0)).restore(tf.train.latest_checkpoint("/tmp/fp32_run"))

model.load_weights("/tmp/pretrained_fp32/model.weights.h5")  # casts on load: not MP301

own = tf.train.Checkpoint(model=model)
manager = tf.train.CheckpointManager(own, "/tmp/fp16_run", max_to_keep=3)
own.restore(manager.latest_checkpoint)
manager.save()
