from setuptools import find_packages, setup

setup(
    name="keras-unet",
    version="0.1.2",
    description="Helper package with multiple U-Net implementations in Keras as well as useful utility tools helpful when working with image segmentation tasks",
    license="MIT",
    packages=find_packages(),
    zip_safe=False,
    install_requires=[],
)
