from setuptools import convert_path, find_packages, setup

ver_file = convert_path("bert/version.py")
ns = {}
with open(ver_file) as fh:
    exec(fh.read(), ns)
__version__ = ns["__version__"]

with open("requirements.txt", "r") as reader:
    install_requires = list(map(lambda x: x.strip(), reader.readlines()))

setup(
    name="bert-for-tf2",
    version=__version__,
    description="A TensorFlow 2.0 Keras implementation of BERT.",
    license="MIT",
    packages=find_packages(exclude=["tests"]),
    install_requires=install_requires,
    python_requires=">=3.5",
)
