import tensorflow as tf


def train_step(model, loss_fn, optimizer, inputs, labels, use_float16):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(inputs, training=True))
        if use_float16:
            scaled_loss = optimizer.get_scaled_loss(loss)
    if use_float16:
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = optimizer.get_unscaled_gradients(scaled_grads)
    else:
        grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
