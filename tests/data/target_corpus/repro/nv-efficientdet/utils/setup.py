import tensorflow as tf


def set_precision(amp):
    if amp:
        policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
        tf.keras.mixed_precision.experimental.set_policy(policy)
    print(tf.keras.mixed_precision.experimental.global_policy())
