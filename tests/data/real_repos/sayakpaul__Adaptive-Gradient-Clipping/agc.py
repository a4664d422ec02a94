"""Adaptive gradient clipping (NFNets), unit-wise."""

import tensorflow as tf


def compute_norm(x, axis, keepdims):
    return tf.math.reduce_sum(x**2, axis=axis, keepdims=keepdims) ** 0.5


def unitwise_norm(x):
    if len(x.get_shape()) <= 1:  # Scalars and vectors
        axis, keepdims = None, False
    elif len(x.get_shape()) in [2, 3]:  # Linear layers of shape IO or multihead linear
        axis, keepdims = 0, True
    elif len(x.get_shape()) == 4:  # Conv kernels of shape HWIO
        axis, keepdims = [0, 1, 2], True
    else:
        raise ValueError(f"Got a parameter with shape not in [1, 2, 4]! {x}")
    return compute_norm(x, axis, keepdims)


def adaptive_clip_grad(parameters, gradients, clip_factor=0.01, eps=1e-3):
    new_grads = []
    for params, grads in zip(parameters, gradients):
        p_norm = unitwise_norm(params)
        max_norm = tf.math.maximum(p_norm, eps) * clip_factor
        grad_norm = unitwise_norm(grads)
        clipped_grad = grads * (max_norm / tf.math.maximum(grad_norm, 1e-6))
        new_grads.append(tf.where(grad_norm < max_norm, grads, clipped_grad))
    return new_grads
