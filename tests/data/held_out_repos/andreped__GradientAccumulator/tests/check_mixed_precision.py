"""The upstream mixed precision test (tests/test_mixed_precision.py, renamed here so that this repository's pytest
does not collect it): MNIST with a mixed_float16 policy, a float32 logits head and a LossScaleOptimizer."""

import multiprocessing as mp


def run_experiment():
    import tensorflow as tf
    import tensorflow_datasets as tfds
    from tensorflow.keras import mixed_precision

    from gradient_accumulator import GradientAccumulateModel

    mixed_precision.set_global_policy("mixed_float16")

    (ds_train, ds_test), ds_info = tfds.load("mnist", split=["train", "test"], as_supervised=True, with_info=True)
    ds_train = ds_train.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)).batch(32)
    ds_test = ds_test.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)).batch(32)

    model = tf.keras.models.Sequential(
        [
            tf.keras.layers.Flatten(input_shape=(28, 28)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(10, dtype="float32"),  # output not numerically stable with float16
        ]
    )
    model = GradientAccumulateModel(accum_steps=4, mixed_precision=True, inputs=model.input, outputs=model.output)

    opt = tf.keras.optimizers.Adam(1e-3)
    opt = mixed_precision.LossScaleOptimizer(opt)
    model.compile(
        optimizer=opt,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
    )
    model.fit(ds_train, epochs=1, validation_data=ds_test)


def check_mixed_precision():
    mp.set_start_method("spawn", force=True)
    process = mp.Process(target=run_experiment)
    process.start()
    process.join()
