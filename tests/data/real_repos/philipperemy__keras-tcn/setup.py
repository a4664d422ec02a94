import os
import platform

from setuptools import setup

tensorflow = "tensorflow"
if platform.system() == "Darwin" and platform.processor() == "arm":
    tensorflow = "tensorflow-macos"
install_requires = ["numpy", tensorflow]
if os.environ.get("GPU"):
    install_requires = ["numpy", "tensorflow-gpu"]

setup(
    name="keras-tcn",
    version="3.5.7",
    description="Keras TCN",
    packages=["tcn"],
    install_requires=install_requires,
)
