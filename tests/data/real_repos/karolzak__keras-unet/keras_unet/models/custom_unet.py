"""A configurable U-Net (reduced: attention gates and upsampling variants left out)."""

from keras_unet import TF

if TF:
    from tensorflow.keras.layers import BatchNormalization, Conv2D, Conv2DTranspose, Dropout, Input, MaxPooling2D, concatenate
    from tensorflow.keras.models import Model
else:
    from keras.layers import BatchNormalization, Conv2D, Conv2DTranspose, Dropout, Input, MaxPooling2D, concatenate
    from keras.models import Model


def conv2d_block(inputs, use_batch_norm=True, dropout=0.3, filters=16, kernel_size=(3, 3), activation="relu", kernel_initializer="he_normal", padding="same"):
    c = Conv2D(filters, kernel_size, activation=activation, kernel_initializer=kernel_initializer, use_bias=not use_batch_norm, padding=padding)(inputs)
    if use_batch_norm:
        c = BatchNormalization()(c)
    if dropout > 0.0:
        c = Dropout(dropout)(c)
    c = Conv2D(filters, kernel_size, activation=activation, kernel_initializer=kernel_initializer, use_bias=not use_batch_norm, padding=padding)(c)
    if use_batch_norm:
        c = BatchNormalization()(c)
    return c


def custom_unet(input_shape, num_classes=1, activation="relu", use_batch_norm=True, upsample_mode="deconv", dropout=0.3, dropout_change_per_layer=0.0, dropout_type="spatial", use_dropout_on_upsampling=False, use_attention=False, filters=16, num_layers=4, output_activation="sigmoid"):
    inputs = Input(input_shape)
    x = inputs
    down_layers = []
    for _ in range(num_layers):
        x = conv2d_block(inputs=x, filters=filters, use_batch_norm=use_batch_norm, dropout=dropout, activation=activation)
        down_layers.append(x)
        x = MaxPooling2D((2, 2))(x)
        dropout += dropout_change_per_layer
        filters = filters * 2
    x = conv2d_block(inputs=x, filters=filters, use_batch_norm=use_batch_norm, dropout=dropout, activation=activation)
    for conv in reversed(down_layers):
        filters //= 2
        x = Conv2DTranspose(filters, (2, 2), strides=(2, 2), padding="same")(x)
        x = concatenate([x, conv])
        x = conv2d_block(inputs=x, filters=filters, use_batch_norm=use_batch_norm, dropout=0.0, activation=activation)
    outputs = Conv2D(num_classes, (1, 1), activation=output_activation)(x)
    return Model(inputs=[inputs], outputs=[outputs])
