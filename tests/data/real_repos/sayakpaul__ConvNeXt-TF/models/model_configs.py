"""Configurations for different ConvNeXt variants (reduced: tiny and small)."""

import ml_collections


def convnext_tiny_config() -> ml_collections.ConfigDict:
    configs = ml_collections.ConfigDict()
    configs.depths = [3, 3, 9, 3]
    configs.dims = [96, 192, 384, 768]
    return configs


def convnext_small_config() -> ml_collections.ConfigDict:
    configs = convnext_tiny_config()
    configs.depths = [3, 3, 27, 3]
    return configs


def get_model_config(model_name: str) -> ml_collections.ConfigDict:
    if model_name == "convnext_tiny":
        return convnext_tiny_config()
    elif model_name == "convnext_small":
        return convnext_small_config()
    raise ValueError(model_name)
