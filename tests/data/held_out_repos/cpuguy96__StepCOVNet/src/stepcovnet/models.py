"""Model architectures for onset detection and arrow prediction."""

import keras
import tensorflow as tf

_MAX_NUM_ARROWS = 2048
_N_ARROW_TYPES = 256


@keras.saving.register_keras_serializable()
class PositionalEncoding(keras.layers.Layer):
    def __init__(self, position, d_model, **kwargs):
        super().__init__(**kwargs)
        self.position = position
        self.d_model = d_model

    def positional_encoding(self, position, d_model):
        positions = tf.range(position, dtype=tf.float32)[:, tf.newaxis]
        dims = tf.range(d_model, dtype=tf.float32)[tf.newaxis, :]
        angles = positions / tf.pow(10000.0, (2.0 * tf.floor(dims / 2.0)) / tf.cast(d_model, tf.float32))
        encoding = tf.where(tf.cast(dims, tf.int32) % 2 == 0, tf.sin(angles), tf.cos(angles))
        return encoding[tf.newaxis, ...]

    def call(self, inputs):
        seq_len = tf.shape(inputs)[1]
        encoding = self.positional_encoding(self.position, self.d_model)[:, :seq_len, :]
        # cast the encoding to the dtype of the inputs before adding
        return inputs + tf.cast(encoding, dtype=inputs.dtype)


def _wavenet_block(x, filters, kernel_size, dilation_rate, prefix):
    x_tanh = keras.layers.Conv1D(filters, kernel_size, dilation_rate=dilation_rate, padding="same", activation="tanh", name=f"{prefix}_tanh")(x)
    x_conv = keras.layers.Conv1D(filters, kernel_size, dilation_rate=dilation_rate, padding="same", name=f"{prefix}_conv")(x)
    x_sigmoid = keras.layers.Activation("sigmoid", name=f"{prefix}_sigmoid")(x_conv)
    gated = keras.layers.Multiply(name=f"{prefix}_multiply")([x_tanh, x_sigmoid])
    residual = keras.layers.Conv1D(filters, 1, name=f"{prefix}_residual")(gated)
    return keras.layers.Add(name=f"{prefix}_add")([x, residual])


def _transformer_encoder(inputs, d_model, num_heads, ff_dim, dropout_rate=0.0):
    assert d_model % num_heads == 0
    kv_dim = d_model // num_heads
    attn_output = keras.layers.MultiHeadAttention(
        num_heads=num_heads,
        key_dim=kv_dim,
        value_dim=kv_dim,
        dtype="float32",  # Needed for numerical stability during inference
    )(inputs, inputs)
    attn_output = keras.layers.Dropout(dropout_rate)(attn_output)
    out1 = keras.layers.LayerNormalization(epsilon=1e-6)(inputs + attn_output)
    ffn_output = keras.layers.Dense(ff_dim, activation="relu")(out1)
    ffn_output = keras.layers.Dense(d_model)(ffn_output)
    ffn_output = keras.layers.Dropout(dropout_rate)(ffn_output)
    return keras.layers.LayerNormalization(epsilon=1e-6)(out1 + ffn_output)


def build_unet_wavenet_model(initial_filters=16, depth=2, dilation_rates=(1, 2, 4, 8), kernel_size=3, dropout_rate=0.0, model_name=""):
    inputs = keras.layers.Input(shape=(None, 128), name="spectrogram")
    x = keras.layers.Conv1D(initial_filters, kernel_size, padding="same", name="input_conv")(inputs)
    skips = []
    for level in range(depth):
        filters = initial_filters * 2**level
        x = keras.layers.Conv1D(filters, kernel_size, padding="same", name=f"enc_{level}_conv")(x)
        for rate in dilation_rates:
            x = _wavenet_block(x, filters, kernel_size, rate, prefix=f"enc_{level}_d{rate}")
        skips.append(x)
        x = keras.layers.MaxPooling1D(2, padding="same", name=f"enc_{level}_pool")(x)
    for level in reversed(range(depth)):
        filters = initial_filters * 2**level
        x = keras.layers.UpSampling1D(2, name=f"dec_{level}_up")(x)
        x = keras.layers.Concatenate(name=f"dec_{level}_concat")([x, skips[level]])
        x = keras.layers.Conv1D(filters, kernel_size, padding="same", name=f"dec_{level}_conv")(x)

    x = keras.layers.Dropout(dropout_rate, name="pre_output_dropout")(x)
    x = keras.layers.Conv1D(filters=16, kernel_size=1, activation="gelu", name="output_conv_1")(x)
    outputs = keras.layers.Conv1D(filters=1, kernel_size=1, activation="sigmoid", name="output_sigmoid")(x)

    name = "stepcovnet_ONSET" + (f"-{model_name}" if model_name else "")
    return keras.Model(inputs=inputs, outputs=outputs, name=name)


def build_arrow_model(num_layers=1, d_model=128, num_heads=4, ff_dim=512, dropout_rate=0.0, model_name=""):
    inputs = keras.layers.Input(shape=(None, 1), name="inputs")
    x = keras.layers.Dense(d_model, name="input_projection")(inputs)
    # scale embeddings by sqrt(d_model)
    x *= tf.math.sqrt(tf.cast(d_model, tf.float32))
    x = PositionalEncoding(position=_MAX_NUM_ARROWS, d_model=d_model)(x)
    x = keras.layers.Dropout(dropout_rate)(x)
    for _ in range(num_layers):
        x = _transformer_encoder(inputs=x, d_model=d_model, num_heads=num_heads, ff_dim=ff_dim, dropout_rate=dropout_rate)

    outputs = keras.layers.Dense(_N_ARROW_TYPES, activation="softmax", name="output_probabilities")(x)

    name = "stepcovnet_ARROW" + (f"-{model_name}" if model_name else "")
    return keras.Model(inputs=inputs, outputs=outputs, name=name)
