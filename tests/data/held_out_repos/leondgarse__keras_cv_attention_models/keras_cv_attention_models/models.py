"""Every model builder by name (train_func.init_model looks them up with getattr)."""

from keras_cv_attention_models.aotnet.aotnet import AotNet50, AotNet101
