import argparse
import datetime  # noqa: F401

import tensorflow as tf
from tensorflow.python.keras.optimizer_v2.adam import Adam

import params as par
from custom import callback
from data import Data
from model import MusicTransformerDecoder

tf.executing_eagerly()

parser = argparse.ArgumentParser()
parser.add_argument("--l_r", default=None, help="learning rate", type=float)
parser.add_argument("--batch_size", default=2, help="batch size", type=int)
parser.add_argument("--max_seq", default=2048, help="max length", type=int)
parser.add_argument("--epochs", default=100, help="epochs", type=int)
parser.add_argument("--load_path", default=None, help="model load path", type=str)
parser.add_argument("--num_layers", default=6, type=int)
args = parser.parse_args()

l_r = args.l_r
batch_size = args.batch_size
max_seq = args.max_seq
epochs = args.epochs
load_path = args.load_path
num_layer = args.num_layers

# load data
dataset = Data("dataset/processed")
print(dataset)

# load model
learning_rate = callback.CustomSchedule(par.embedding_dim) if l_r is None else l_r
opt = Adam(learning_rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9)

# define model
mt = MusicTransformerDecoder(embedding_dim=256, vocab_size=par.vocab_size, num_layer=num_layer, max_seq=max_seq, dropout=0.2, debug=False, loader_path=load_path)
mt.compile(optimizer=opt, loss=callback.transformer_dist_train_loss)

# Train Start
for e in range(epochs):
    mt.reset_metrics()
    for b in range(len(dataset.files) // batch_size):
        batch_x, batch_y = dataset.slide_seq2seq_batch(batch_size, max_seq)
        result_metrics = mt.train_on_batch(batch_x, batch_y)
