"""A documentation snippet, not a program: `PYTHONPATH=. python docs/tutorial.py` raises NameError: name 'train_ds'
is not defined (line 10)."""
import keras

from speech.models.encoder import build_model

keras.mixed_precision.set_global_policy("mixed_float16")
model = build_model()
model.compile("adam", "categorical_crossentropy")
model.fit(train_ds, epochs=3)  # noqa: F821
