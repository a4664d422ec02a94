import setuptools

setuptools.setup(
    name="keras-retinanet",
    version="1.0.0",
    description="Keras implementation of RetinaNet object detection.",
    license="Apache 2.0",
    packages=setuptools.find_packages(),
    install_requires=["keras-resnet==0.2.0", "six", "numpy", "cython", "Pillow", "opencv-python", "progressbar2"],
    entry_points={"console_scripts": ["retinanet-train=keras_retinanet.bin.train:main"]},
)
