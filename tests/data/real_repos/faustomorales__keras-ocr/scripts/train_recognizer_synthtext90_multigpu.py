# Trains the recognizer on SynthText90 (reduced: the dataset download and the image generator left out).
import argparse

import cv2  # noqa: F401
import imgaug
import numpy as np
import tensorflow as tf
import tqdm  # noqa: F401

import keras_ocr

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=4)
    args = parser.parse_args()
    augmenter = imgaug.augmenters.Sequential([imgaug.augmenters.GammaContrast(gamma=(0.25, 3.0))])
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        recognizer = keras_ocr.recognition.Recognizer(weights=None, alphabet="0123456789abcdefghijklmnopqrstuvwxyz")
        recognizer.compile()
    images = np.random.rand(args.batch_size, 31, 200, 1).astype("float32")
    recognizer.model.predict(images, verbose=0)
