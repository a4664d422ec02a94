from __future__ import absolute_import

from tensorflow.keras.layers import Input
from tensorflow.keras.models import Model

from keras_unet_collection.layer_utils import *  # noqa: F403


def unet_2d_base(input_tensor, filter_num, stack_num_down=2, stack_num_up=2, activation="ReLU", batch_norm=False, pool=True, unpool=True, name="unet"):
    X = input_tensor
    X_skip = []
    X = ConvStack(X, filter_num[0], stack_num=stack_num_down, activation=activation, batch_norm=batch_norm, name="{}_down0".format(name))  # noqa: F405
    X_skip.append(X)
    for i, f in enumerate(filter_num[1:]):
        X = MaxPooling2D(name="{}_down{}_pool".format(name, i + 1))(X)  # noqa: F405
        X = ConvStack(X, f, stack_num=stack_num_down, activation=activation, batch_norm=batch_norm, name="{}_down{}".format(name, i + 1))  # noqa: F405
        X_skip.append(X)
    X_skip = X_skip[:-1][::-1]
    for i, f in enumerate(filter_num[:-1][::-1]):
        X = UpSampling2D(name="{}_up{}_unpool".format(name, i))(X)  # noqa: F405
        X = concatenate([X, X_skip[i]], axis=-1, name="{}_up{}_concat".format(name, i))  # noqa: F405
        X = ConvStack(X, f, stack_num=stack_num_up, activation=activation, batch_norm=batch_norm, name="{}_up{}".format(name, i))  # noqa: F405
    return X


def unet_2d(input_size, filter_num, n_labels, stack_num_down=2, stack_num_up=2, activation="ReLU", output_activation="Softmax", batch_norm=False, pool=True, unpool=True, backbone=None, weights="imagenet", freeze_backbone=True, freeze_batch_norm=True, name="unet"):
    IN = Input(input_size)
    X = unet_2d_base(IN, filter_num, stack_num_down=stack_num_down, stack_num_up=stack_num_up, activation=activation, batch_norm=batch_norm, pool=pool, unpool=unpool, name=name)
    OUT = CONV_output(X, n_labels, kernel_size=1, activation=output_activation, name="{}_output".format(name))  # noqa: F405
    return Model(inputs=[IN], outputs=[OUT], name="{}_model".format(name))
