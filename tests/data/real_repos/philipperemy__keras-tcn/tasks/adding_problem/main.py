from tensorflow.keras.callbacks import Callback
from utils import data_generator

from tcn import compiled_tcn, tcn_full_summary

x_train, y_train = data_generator(n=64, seq_length=60)
x_test, y_test = data_generator(n=16, seq_length=60)


class PrintSomeValues(Callback):
    def on_epoch_begin(self, epoch, logs={}):
        print("y_true, y_pred")
        print(self.model.predict(x_test[:2], verbose=0))


def run_task():
    model = compiled_tcn(
        return_sequences=False,
        num_feat=x_train.shape[2],
        num_classes=0,
        nb_filters=16,
        kernel_size=4,
        dilations=[2**i for i in range(3)],
        nb_stacks=1,
        max_len=x_train.shape[1],
        use_skip_connections=False,
        regression=True,
    )
    tcn_full_summary(model)
    model.fit(x_train, y_train, validation_data=(x_test, y_test), epochs=1, callbacks=[PrintSomeValues()], batch_size=16, verbose=0)


if __name__ == "__main__":
    run_task()
