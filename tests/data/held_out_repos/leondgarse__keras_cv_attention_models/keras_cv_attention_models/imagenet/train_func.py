"""Training helpers: the distribution strategy (and the global policy with it), model init and compile."""

import tensorflow as tf
from tensorflow import keras

import keras_cv_attention_models

GLOBAL_STRATEGY = None


def init_global_strategy(enable_float16=True, seed=0, TPU=False):
    global GLOBAL_STRATEGY
    if GLOBAL_STRATEGY is not None:
        return GLOBAL_STRATEGY

    gpus = tf.config.experimental.get_visible_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)

    if TPU:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    elif len(gpus) > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.OneDeviceStrategy(device="/gpu:0")
    GLOBAL_STRATEGY = strategy

    if enable_float16:
        policy = "mixed_bfloat16" if TPU else "mixed_float16"
        tf.keras.mixed_precision.set_global_policy(policy)

    if seed is not None:
        tf.random.set_seed(seed)
    return strategy


def init_model(model=None, input_shape=(224, 224, 3), num_classes=1000, pretrained=None, **kwargs):
    if isinstance(model, str) and model.endswith(".h5"):
        return keras.models.load_model(model)
    kwargs.update({"input_shape": input_shape, "num_classes": num_classes})
    model_name = model.strip().split(".")
    if len(model_name) == 1:
        return getattr(keras_cv_attention_models.models, model_name[0])(**kwargs)
    model_class = getattr(getattr(keras_cv_attention_models, model_name[0]), model_name[1])
    return model_class(**kwargs)


def compile_model(model, optimizer, lr_base, loss, metrics=("acc",)):
    if isinstance(optimizer, str):
        optimizer = getattr(keras.optimizers, optimizer.capitalize())(learning_rate=lr_base)
    model.compile(optimizer=optimizer, loss=loss, metrics=list(metrics))
    return model


def train(compiled_model, epochs, train_dataset, test_dataset=None, initial_epoch=0):
    return compiled_model.fit(train_dataset, epochs=epochs, initial_epoch=initial_epoch, validation_data=test_dataset)
