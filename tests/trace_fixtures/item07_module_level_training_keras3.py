# Item 7: a script that trains at module level (no `if __name__ == "__main__":` guard): 300 epochs of 250 batches
# would run for minutes under the trace and lose every finding to its timeout. The trace is a dry run: `fit` and
# `evaluate` run a batch or two and return, the rest of the file runs as written, and the float16 softmax head is
# reported. A `__main__` run with `ground` counts the batches a real `fit` call runs (the ground truth of "long").
# fixture-codes: MP401 MP001
import sys

import numpy as np
import keras

keras.mixed_precision.set_global_policy("mixed_float16")

inputs = keras.Input((8,))
hidden = keras.layers.Dense(16, activation="relu")(inputs)
outputs = keras.layers.Dense(4, activation="softmax")(hidden)  # expect: MP401
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")

features = np.random.default_rng(0).random((2000, 8)).astype("float32")
labels = np.random.default_rng(1).integers(0, 4, 2000)
EPOCHS = 1 if "ground" in sys.argv else 300
batches = []
history = model.fit(
    features,
    labels,
    batch_size=8,
    epochs=EPOCHS,
    validation_data=(features, labels),
    callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batches.append(batch))],
)
loss = model.evaluate(features, labels, batch_size=8)
print("after training", len(history.history["loss"]), loss)

if __name__ == "__main__" and "ground" in sys.argv:
    print("ground", len(batches))
