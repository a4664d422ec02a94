"""Training loops for the onset and arrow models."""

import keras

from stepcovnet import models


def run_train_from_config(dataset_config, model_config, run_config, train_ds=None, val_ds=None):
    model = models.build_unet_wavenet_model(
        initial_filters=model_config.initial_filters,
        depth=model_config.depth,
        dropout_rate=model_config.dropout_rate,
        model_name=run_config.model_name,
    )
    if dataset_config.use_gaussian_target:
        loss = keras.losses.MeanSquaredError()
    else:
        loss = keras.losses.BinaryFocalCrossentropy(apply_class_balancing=True)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3), loss=loss, metrics=["precision", "recall"])
    return model, model.fit(train_ds, epochs=run_config.epoch, validation_data=val_ds)


def run_arrow_train_from_config(dataset_config, model_config, run_config, train_ds=None, val_ds=None):
    model = models.build_arrow_model(
        num_layers=model_config.num_layers,
        d_model=model_config.d_model,
        num_heads=model_config.num_heads,
        ff_dim=model_config.ff_dim,
        dropout_rate=model_config.dropout_rate,
        model_name=run_config.model_name,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    return model, model.fit(train_ds, epochs=run_config.epoch, validation_data=val_ds)
