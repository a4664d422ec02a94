import numpy as np
import tensorflow as tf

import params as par


def get_masked_with_pad_tensor(size, src, trg, pad_token=par.pad_token):
    src = src[:, None, None, :]
    trg = trg[:, None, None, :]
    src_pad_tensor = tf.ones_like(src) * pad_token
    src_mask = tf.cast(tf.equal(src, src_pad_tensor), dtype=tf.int32)
    look_ahead_mask = tf.cast(1 - np.tril(np.ones((size, size))), tf.int32)
    return src_mask, look_ahead_mask
