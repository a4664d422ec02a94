"""The file's own training steps by name (mpdoctor.static.training_steps, issue 30): what the trace child runs for
MP504 with the step's own loss. No TensorFlow needed."""

from __future__ import annotations

import ast
import textwrap

from mpdoctor.static.context import StaticContext
from mpdoctor.static.training_steps import training_steps

SOURCE = """\
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)


    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))


    class Trainer:
        def step(self, images):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(images))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))


    def train(dataset, epochs, verbose):  # a whole loop: not called as a step
        for x, y in dataset:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))


    for x, y in []:  # a loop at module level: nothing to call
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """


def test_the_steps_are_the_functions_and_methods_called_as_a_step_that_hold_a_training_loop():
    text = textwrap.dedent(SOURCE)
    ctx = StaticContext("train.py", "train.py", text, ast.parse(text))
    assert training_steps(ctx) == ["train_step", "Trainer.step"]
