from .custom_unet import custom_unet  # noqa: F401
