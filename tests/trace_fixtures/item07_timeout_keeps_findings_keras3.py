# Item 7: the findings gathered before a timeout are kept. The file builds a model with a float16 softmax
# head, then trains in a loop that never ends (the trace's dry run cannot bound a hand-written loop). At the timeout
# the trace stops the run: MP401 still comes from the model built before, and MP001 names the line of the loop that
# was running. MPDOCTOR_TEST_PID_FILE (set by the test) receives the process's pid, to check nothing is left
# running. A `__main__` run with `ground` skips the loop and prints the head's output dtype (the ground truth).
# fixture-codes: MP401 MP001
import itertools
import os
import sys
import time

import numpy as np
import keras

keras.mixed_precision.set_global_policy("mixed_float16")

inputs = keras.Input((8,))
hidden = keras.layers.Dense(16, activation="relu")(inputs)
outputs = keras.layers.Dense(4, activation="softmax")(hidden)  # expect: MP401
model = keras.Model(inputs, outputs)

if os.environ.get("MPDOCTOR_TEST_PID_FILE"):
    with open(os.environ["MPDOCTOR_TEST_PID_FILE"], "w") as handle:
        handle.write(str(os.getpid()))


def train_forever():
    for _step in itertools.count():
        time.sleep(0.1)  # expect: MP001


if "ground" not in sys.argv:
    train_forever()

if __name__ == "__main__" and "ground" in sys.argv:
    print("ground", model(np.ones((2, 8), "float32")).dtype.name)
