import os

from setuptools import find_packages, setup

here = os.path.abspath(os.path.dirname(__file__))
with open(os.path.join(here, "requirements.txt")) as f:
    REQUIRED = f.read().split("\n")

setup(
    name="segmentation_models",
    version="1.0.1",
    description="Image segmentation models with pre-trained backbones with Keras.",
    license="MIT",
    packages=find_packages(exclude=("tests", "docs", "images")),
    install_requires=REQUIRED,
)
