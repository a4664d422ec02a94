"""Builds the Hugging Face TF model from a config or a pretrained checkpoint."""

import tensorflow as tf
from transformers import AutoConfig


def create_model(model_class, model_args) -> tf.keras.Model:
    if model_args.load_from == "scratch":
        config = AutoConfig.for_model(model_args.model_type)
        return model_class.from_config(config)
    return model_class.from_pretrained(model_args.model_desc)
