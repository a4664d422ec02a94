"""Temporal convolutional network layer (reduced: residual blocks of dilated causal convolutions)."""

from tensorflow.keras import Input, Model, layers, optimizers


class TCN(layers.Layer):
    def __init__(self, nb_filters=16, kernel_size=2, nb_stacks=1, dilations=(1, 2, 4), padding="causal", use_skip_connections=True, return_sequences=False, use_batch_norm=False, **kwargs):
        super().__init__(**kwargs)
        self.return_sequences = return_sequences
        self.use_skip_connections = use_skip_connections
        self.blocks = [
            (layers.Conv1D(nb_filters, kernel_size, dilation_rate=d, padding=padding, activation="relu"), layers.Conv1D(nb_filters, 1))
            for _ in range(nb_stacks)
            for d in dilations
        ]
        self.slicer = layers.Lambda(lambda tt: tt[:, -1, :])

    def call(self, inputs):
        x = inputs
        skips = []
        for conv, match in self.blocks:
            out = conv(x)
            x = layers.add([match(x), out]) if x.shape[-1] != out.shape[-1] else x + out
            skips.append(out)
        if self.use_skip_connections:
            x = layers.add(skips)
        return x if self.return_sequences else self.slicer(x)


def compiled_tcn(num_feat, num_classes, nb_filters, kernel_size, dilations, nb_stacks, max_len, output_len=1, regression=False, lr=0.002, **kwargs):
    input_layer = Input(shape=(max_len, num_feat))
    x = TCN(nb_filters, kernel_size, nb_stacks, dilations, **kwargs)(input_layer)
    if not regression:
        x = layers.Dense(num_classes)(x)
        x = layers.Activation("softmax")(x)
        loss = "sparse_categorical_crossentropy"
    else:
        x = layers.Dense(output_len)(x)
        x = layers.Activation("linear")(x)
        loss = "mean_squared_error"
    model = Model(input_layer, x)
    model.compile(optimizers.Adam(learning_rate=lr, clipnorm=1.0), loss=loss)
    return model


def tcn_full_summary(model, expand_residual_blocks=True):
    model.summary()
