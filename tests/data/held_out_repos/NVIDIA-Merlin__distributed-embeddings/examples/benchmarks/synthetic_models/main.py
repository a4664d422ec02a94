"""Benchmarks of synthetic models: `python main.py --model tiny --amp`."""

from time import time

import horovod.tensorflow.keras as hvd
import tensorflow as tf
from absl import app, flags
from tensorflow import keras
from tensorflow.keras import mixed_precision

from config_v3 import synthetic_models_v3
from synthetic_models import InputGenerator, SyntheticModelNative

flags.DEFINE_integer("batch_size", 4, help="Global batch size")
flags.DEFINE_integer("num_steps", 100, help="Number of steps to benchmark")
flags.DEFINE_string("model", "tiny", help="Choose model size to run benchmark")
flags.DEFINE_enum("optimizer", "sgd", ["sgd", "adagrad", "adam"], help="Optimizer")
flags.DEFINE_bool("use_model_fit", False, help="Use Keras model.fit")
flags.DEFINE_bool("amp", False, help="Use mixed precision")

FLAGS = flags.FLAGS


def main(_):
    hvd.init()
    if FLAGS.amp:
        mixed_precision.set_global_policy("mixed_float16")

    model_config = synthetic_models_v3[FLAGS.model]
    model = SyntheticModelNative(model_config)
    input_gen = InputGenerator(model_config, FLAGS.batch_size)

    if FLAGS.optimizer == "sgd":
        optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=0.03, momentum=0)
    if FLAGS.optimizer == "adagrad":
        optimizer = tf.keras.optimizers.legacy.Adagrad()
    if FLAGS.optimizer == "adam":
        optimizer = tf.keras.optimizers.legacy.Adam()

    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    if FLAGS.use_model_fit:
        model.compile(optimizer=optimizer, loss=bce)
        model.fit(input_gen, epochs=FLAGS.num_steps, batch_size=FLAGS.batch_size)
        return

    # Not using model.fit(): benchmark a custom loop
    (numerical_features, cat_features), labels = input_gen[-1]
    model((numerical_features, cat_features))

    @tf.function
    def train_step(numerical_features, categorical_features, labels):
        with tf.GradientTape() as tape:
            predictions = model((numerical_features, categorical_features))
            loss = bce(labels, predictions)
        tape = hvd.DistributedGradientTape(tape)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    start = time()
    for _ in range(FLAGS.num_steps):
        loss = train_step(numerical_features, cat_features, labels)
    print(f"Loss {float(loss):.3f}, {(time() - start) * 1000 / FLAGS.num_steps:.2f} ms/step")


if __name__ == "__main__":
    app.run(main)
