"""Demo of time series prediction by tfts
python run_prediction_simple.py --use_model rnn
"""

import argparse

import matplotlib.pyplot as plt  # noqa: F401
import tensorflow as tf
from tensorflow.keras.callbacks import EarlyStopping

import tfts
from tfts import AutoConfig, AutoModel, KerasTrainer


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=315, required=False, help="seed")
    parser.add_argument("--use_model", type=str, default="rnn", help="model for train")
    parser.add_argument("--train_length", type=int, default=24, help="sequence length for train")
    parser.add_argument("--predict_sequence_length", type=int, default=8, help="sequence length for predict")
    parser.add_argument("--epochs", type=int, default=1, help="Number of training epochs")
    parser.add_argument("--learning_rate", type=float, default=5e-4, help="learning rate for training")
    return parser.parse_args()


def run_train(args):
    tfts.set_seed(args.seed)
    train, valid = tfts.get_data("sine", args.train_length, args.predict_sequence_length, test_size=0.2)
    optimizer = tf.keras.optimizers.Adam(args.learning_rate)
    loss_fn = tf.keras.losses.MeanSquaredError()
    config = AutoConfig.for_model(args.use_model)
    model = AutoModel.from_config(config, predict_sequence_length=args.predict_sequence_length)
    trainer = KerasTrainer(model)
    trainer.train(train, valid, optimizer=optimizer, loss_fn=loss_fn, epochs=args.epochs, callbacks=[EarlyStopping("val_loss", patience=5)])
    return trainer.predict(valid[0])


if __name__ == "__main__":
    args = parse_args()
    run_train(args)
