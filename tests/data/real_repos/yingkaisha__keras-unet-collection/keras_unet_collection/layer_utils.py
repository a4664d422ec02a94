from __future__ import absolute_import

from tensorflow.keras.layers import BatchNormalization, Conv2D, MaxPooling2D, UpSampling2D, concatenate  # noqa: F401

from keras_unet_collection.activations import GELU


def ConvStack(X, channel, kernel_size=3, stack_num=2, activation="ReLU", batch_norm=False, name="conv_stack"):
    for i in range(stack_num):
        X = Conv2D(channel, kernel_size, padding="same", use_bias=not batch_norm, name="{}_{}".format(name, i))(X)
        if batch_norm:
            X = BatchNormalization(axis=3, name="{}_{}_bn".format(name, i))(X)
        X = GELU(name="{}_{}_activation".format(name, i))(X) if activation == "GELU" else eval(activation)(name="{}_{}_activation".format(name, i))(X)
    return X


def CONV_output(X, n_labels, kernel_size=1, activation="Softmax", name="conv_output"):
    from tensorflow.keras.layers import Activation

    X = Conv2D(n_labels, kernel_size, padding="same", use_bias=True, name=name)(X)
    if activation:
        X = Activation(activation.lower(), name="{}_activation".format(name))(X)
    return X


from tensorflow.keras.layers import ReLU  # noqa: E402,F401
