"""Timing helpers: fit and generate for NUM_STEPS steps, synthetic text datasets."""

import time

import keras

import benchmark


class BenchmarkMetricsCallback(keras.callbacks.Callback):
    def __init__(self, start_batch=1, stop_batch=None):
        self.start_batch = start_batch
        self.stop_batch = stop_batch
        self.state = {}

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.start_batch:
            self.state["benchmark_begin"] = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.stop_batch:
            elapsed = time.time() - self.state["benchmark_begin"]
            self.time_per_step = elapsed / (self.stop_batch - self.start_batch + 1)


def fit(model, dataset):
    callback = BenchmarkMetricsCallback(stop_batch=benchmark.NUM_STEPS)
    model.fit(dataset, epochs=1, callbacks=[callback])
    return 1000.0 * callback.time_per_step


def generate(model, batch_size, max_length):
    inputs = benchmark.get_prompts(batch_size, benchmark.NUM_WORDS)
    model.generate(inputs, max_length=max_length)
    start_time = time.time()
    for _ in range(benchmark.NUM_STEPS):
        model.generate(inputs, max_length=max_length)
    return (time.time() - start_time) / benchmark.NUM_STEPS * 1000


def use_jit():
    # jit_compile=False only with the torch backend
    return not (hasattr(keras, "version") and keras.version().startswith("3.") and keras.backend.backend() == "torch")


def get_train_dataset_for_text_gen(preprocessor, batch_size, seq_len):
    import tensorflow as tf

    prompts = benchmark.get_prompts(num_prompts=batch_size, num_words=seq_len)
    dataset = tf.data.Dataset.from_tensor_slices((tf.constant(prompts), tf.constant(prompts)))
    return dataset.repeat().batch(batch_size).take(benchmark.NUM_STEPS + 1).map(preprocessor).cache()
