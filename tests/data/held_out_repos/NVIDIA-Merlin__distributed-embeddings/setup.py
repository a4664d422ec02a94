"""Packaging: the requirements come from requirements.txt (empty: TensorFlow comes from the NGC container)."""

import os

from setuptools import find_packages, setup

with open("requirements.txt", encoding="utf-8") as handle:
    requirements = handle.read().splitlines()

abspath = os.path.dirname(os.path.realpath(__file__))

setup(
    name="distributed-embeddings",
    version="0.4",
    packages=find_packages(),
    install_requires=requirements,
)
