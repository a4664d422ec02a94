import argparse

import tensorflow as tf


def dynamic_memory_allocation():
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)


def basic_train_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", dest="config", type=str)
    parser.add_argument("--reset_dir", dest="clear_dir", action="store_true", help="deletes everything under this config's folder.")
    parser.add_argument("--reset_logs", dest="clear_logs", action="store_true", help="deletes logs under this config's folder.")
    parser.add_argument("--reset_weights", dest="clear_weights", action="store_true", help="deletes weights under this config's folder.")
    return parser
