# Item 10: under mixed_bfloat16 the softmax head is MP401 for bfloat16's own reason (8 bits of mantissa: the top
# probability rounds to exactly 1.0), never for float16's 65504 overflow: bfloat16 has float32's range.
# fixture-codes: MP401 MP402
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_bfloat16")
inputs = keras.Input((16,))
hidden = keras.layers.Dense(32, activation="relu")(inputs)
outputs = keras.layers.Dense(4, activation="softmax")(hidden)  # expect: MP401
model = keras.Model(inputs, outputs)
