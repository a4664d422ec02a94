import tensorflow as tf
from tensorflow.python import keras
from tensorflow.python.keras.optimizer_v2.learning_rate_schedule import LearningRateSchedule

import params as par


class TransformerLoss(keras.losses.SparseCategoricalCrossentropy):
    def __init__(self, from_logits=False, reduction="none", debug=False, **kwargs):
        super(TransformerLoss, self).__init__(from_logits=from_logits, reduction=reduction, **kwargs)
        self.debug = debug


def transformer_dist_train_loss(y_true, y_pred):
    y_true = tf.cast(y_true, tf.int32)
    mask = tf.math.logical_not(tf.math.equal(y_true, par.pad_token))
    loss = tf.keras.losses.sparse_categorical_crossentropy(y_true, y_pred)
    return tf.reduce_mean(loss * tf.cast(mask, loss.dtype))


class CustomSchedule(LearningRateSchedule):
    def __init__(self, d_model, warmup_steps=4000):
        super(CustomSchedule, self).__init__()
        self.d_model = tf.cast(d_model, tf.float32)
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        arg1 = tf.math.rsqrt(tf.cast(step, tf.float32))
        arg2 = tf.cast(step, tf.float32) * (self.warmup_steps**-1.5)
        return tf.math.rsqrt(self.d_model) * tf.math.minimum(arg1, arg2)
