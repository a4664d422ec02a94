import tensorflow as tf
from tensorflow.keras import mixed_precision

policy = mixed_precision.Policy("mixed_float16")
mixed_precision.set_global_policy(policy)
optimizer = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))
