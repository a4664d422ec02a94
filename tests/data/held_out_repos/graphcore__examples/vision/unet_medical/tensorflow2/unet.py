"""Builds, compiles and trains the UNet on the IPU: float16 throughout, with a fixed loss scale."""

import tensorflow as tf
from tensorflow import keras
from tensorflow.python import ipu

from losses import ce_loss, dice_ce_loss, dice_coef_accuracy_fn
from model import model_fn


def get_optimizer(args):
    def gradient_normalizer(grads_and_vars):
        return [(grad / args.replicas / args.gradient_accumulation_count, var) for grad, var in grads_and_vars]

    if args.optimizer == "adam":
        optimizer_instance = keras.optimizers.Adam(learning_rate=args.learning_rate, epsilon=1e-4, gradient_transformers=[gradient_normalizer])
    else:
        optimizer_instance = keras.optimizers.SGD(learning_rate=args.learning_rate, momentum=0.99, gradient_transformers=[gradient_normalizer])

    # Use loss scaling for FP16
    if args.dtype == "float16":
        optimizer_instance = tf.keras.mixed_precision.LossScaleOptimizer(optimizer_instance, False, args.loss_scale)
    return optimizer_instance


def create_model(args):
    model = keras.Model(*model_fn(args))
    model.compile(optimizer=get_optimizer(args), loss=dice_ce_loss, metrics=[dice_coef_accuracy_fn, ce_loss])
    return model


def unet(args, ds_train, ds_eval=None):
    config = ipu.config.IPUConfig()
    config.auto_select_ipus = args.replicas
    config.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        model = create_model(args)
        return model.fit(ds_train, epochs=args.num_epochs, validation_data=ds_eval)
