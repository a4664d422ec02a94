"""The precision setup every module of the package imports, written for TF < 2.9: on TF 2.21 its import of the
removed `mixed_precision.experimental` raises ImportError at line 5 (MP103 reports it; the run of this file does
not repeat it as MP001)."""

from tensorflow.keras.mixed_precision import experimental as mixed_precision

policy = mixed_precision.Policy("mixed_float16")
mixed_precision.set_policy(policy)
