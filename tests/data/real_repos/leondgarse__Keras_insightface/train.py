"""The Train class (reduced: evals and myCallbacks left out). Upstream usage, from the README:

    keras.mixed_precision.set_global_policy("mixed_float16")
    tt = train.Train(data_path, save_path="ghostnet.h5", basic_model=basic_model, ...)
    tt.train([{"loss": losses.ArcfaceLoss(), "epoch": 1}])
"""

import data
import losses
import models
import tensorflow as tf
from tensorflow import keras

gpus = tf.config.experimental.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)


class Train:
    def __init__(self, data_path=None, save_path="model.h5", basic_model="ghostnet", model=None, batch_size=4, classes=8, lr_base=0.001):
        if model is None:
            self.basic_model = models.buildin_models(basic_model) if isinstance(basic_model, str) else basic_model
            inputs = self.basic_model.inputs[0]
            embedding = self.basic_model.outputs[0]
            output = models.NormDense(classes, name="arcface")(embedding)
            output_fp32 = keras.layers.Activation("linear", dtype="float32", name="arcface_fp32")(output)
            self.model = keras.models.Model(inputs, output_fp32)
        else:
            self.model = model
        self.train_ds = data.prepare_dataset(data_path, batch_size=batch_size, classes=classes)
        self.optimizer = keras.optimizers.SGD(learning_rate=lr_base, momentum=0.9)
        self.save_path = save_path

    def train(self, train_schedule, initial_epoch=0):
        for sch in train_schedule:
            self.model.compile(optimizer=self.optimizer, loss=sch["loss"])
            self.model.fit(self.train_ds, epochs=sch["epoch"], initial_epoch=initial_epoch, verbose=0)
        return self.model


if __name__ == "__main__":
    keras.mixed_precision.set_global_policy("mixed_float16")
    tt = Train(basic_model="mobilenet")
    tt.train([{"loss": losses.ArcfaceLoss(), "epoch": 1}])
