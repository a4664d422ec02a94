import setuptools

with open("README.md") as handle:
    long_description = handle.read()

setuptools.setup(
    name="gradient-accumulator",
    version="0.5.2",
    description="Package for gradient accumulation in TensorFlow",
    long_description=long_description,
    packages=setuptools.find_packages(exclude=("tests",)),
    install_requires=[
        "tensorflow",
        "numpy<=1.23.2",
    ],
    extras_require={"dev": ["pytest-cov", "tensorflow-datasets<=4.8.2", "protobuf<=3.20"]},
    python_requires=">=3.6",
)
