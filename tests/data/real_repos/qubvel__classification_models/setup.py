import os

from setuptools import find_packages, setup

here = os.path.abspath(os.path.dirname(__file__))
with open(os.path.join(here, "requirements.txt")) as f:
    REQUIRED = f.read().split("\n")

setup(
    name="image-classifiers",
    version="1.0.0",
    description="Image classification models. Keras.",
    license="MIT",
    packages=find_packages(exclude=("tests",)),
    install_requires=REQUIRED,
)
